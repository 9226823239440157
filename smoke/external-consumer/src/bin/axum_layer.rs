//! Serves README "The admission layer" as the README says (over TCP, with
//! `PeerConnection` as the connect info) and checks what callers see: paths
//! the router does not have are 404, a login is admitted until its account's
//! quota is spent and then refused 429, a form without the account is 400
//! and an API call without its key 401, every refusal problem details.

use std::{error::Error, net::SocketAddr};

use runlimit_axum::PeerConnection;
use runlimit_core::KeyHasher;
use runlimit_external_consumer::axum_layer::app;
use runlimit_memory::{MemoryStore, MemoryStoreConfig};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// A response's status and its head (lower-cased) and body, as received.
struct Answer {
    status: u16,
    text: String,
}

impl Answer {
    fn has(&self, line: &str) -> bool {
        self.text.contains(line)
    }
}

/// Sends one request over a connection of its own and reads the answer.
async fn send(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, Box<dyn Error>> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    let status = text
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .ok_or("a response without a status line")?;
    Ok(Answer {
        status,
        text: text.to_lowercase(),
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let hasher = KeyHasher::new(b"smoke-test secret of at least 32 bytes")?;
    let app = app(&hasher, MemoryStore::new(MemoryStoreConfig::new(50_000)?))?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<PeerConnection>(),
        )
        .await
    });
    let form = [("content-type", "application/x-www-form-urlencoded")];

    // Paths the router does not have are the fallback's: 404, never checked.
    for (method, path) in [
        ("GET", "/robots.txt"),
        ("POST", "/robots.txt"),
        ("GET", "/"),
    ] {
        let answer = send(address, method, path, &form, "").await?;
        assert_eq!(answer.status, 404, "{method} {path}");
    }
    // A method the route does not serve is the route's 405, never checked.
    assert_eq!(send(address, "GET", "/login", &[], "").await?.status, 405);

    // Eight logins to one account, however it is spelled, then 429.
    for spelling in [
        "Alice%40Example.test",
        "alice%40example.test",
        "+ALICE@example.test",
    ] {
        let answer = send(
            address,
            "POST",
            "/login",
            &form,
            &format!("account={spelling}"),
        )
        .await?;
        assert_eq!(answer.status, 200, "{spelling}");
    }
    for _ in 3..8 {
        let answer = send(
            address,
            "POST",
            "/login",
            &form,
            "account=alice%40example.test",
        )
        .await?;
        assert_eq!(answer.status, 200);
    }
    let refused = send(
        address,
        "POST",
        "/login",
        &form,
        "account=alice%40example.test",
    )
    .await?;
    assert_eq!(refused.status, 429);
    assert!(refused.has("retry-after: 60"), "{}", refused.text);
    assert!(
        refused.has("content-type: application/problem+json"),
        "{}",
        refused.text
    );
    assert!(!refused.has("alice"), "no subject in the answer");
    // Another account is admitted: the refusal was the account's, not the client's.
    assert_eq!(
        send(
            address,
            "POST",
            "/login",
            &form,
            "account=bob%40example.test"
        )
        .await?
        .status,
        200
    );

    // The caller's omissions: 400, and 401 with a challenge for the API key.
    let no_account = send(address, "POST", "/login", &form, "password=hunter2").await?;
    assert_eq!(no_account.status, 400);
    assert!(
        no_account.has("content-type: application/problem+json"),
        "{}",
        no_account.text
    );
    assert!(no_account.has("account"), "{}", no_account.text);
    let no_key = send(address, "GET", "/orders", &[], "").await?;
    assert_eq!(no_key.status, 401);
    assert!(no_key.has("www-authenticate: apikey"), "{}", no_key.text);
    assert_eq!(
        send(address, "GET", "/orders", &[("x-api-key", "k-1")], "")
            .await?
            .status,
        200
    );

    server.abort();
    println!(
        "README admission layer served: unknown paths 404, logins 200 then 429, omissions 400/401"
    );
    Ok(())
}
