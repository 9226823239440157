//! The built binary: `serve` on loopback ports, `check` against it, and a
//! graceful shutdown on SIGTERM.
#![cfg(unix)]

mod common;

use common::{
    TempDir,
    binary::{BOUND, command, serve},
};
use tokio::{process::Command, time::timeout};

const RULES: &str = "
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-ip}
";

/// Runs `check` with `args`: its exit code and standard output.
async fn check(args: &[&str]) -> (i32, String) {
    let output = timeout(BOUND, command().arg("check").args(args).output())
        .await
        .expect("check ends in time")
        .expect("check runs");
    (
        output.status.code().expect("an exit code"),
        String::from_utf8(output.stdout).expect("text"),
    )
}

#[tokio::test]
async fn check_prints_the_statuses_of_a_running_server_which_stops_gracefully_on_sigterm() {
    let dir = TempDir::new("cli");
    dir.write("edge.yaml", RULES);
    let secret = dir.path().join("secret");
    std::fs::write(
        &secret,
        "a secret of at least thirty-two bytes, from a file\n",
    )
    .expect("write");
    let mut server = serve(&dir, &["--secret-file", secret.to_str().expect("UTF-8")]).await;
    let ask = |extra: &'static [&'static str]| {
        let grpc = server.grpc.clone();
        async move {
            let mut args = vec![
                "--addr",
                &grpc,
                "--domain",
                "edge",
                "remote_address=192.0.2.7",
            ];
            args.extend(extra);
            check(&args).await
        }
    };

    assert_eq!(
        ask(&[]).await,
        (
            0,
            "OK\ndescriptor 0: OK limit=2/minute name=per-ip remaining=1 reset=60s\n".to_owned()
        )
    );
    // A peek counts nothing.
    assert_eq!(
        ask(&["--hits", "0"]).await,
        (
            0,
            "OK\ndescriptor 0: OK limit=2/minute name=per-ip remaining=1 reset=60s\n".to_owned()
        )
    );
    assert_eq!(ask(&[]).await.0, 0);
    let (code, output) = ask(&[]).await;
    assert_eq!(code, 1, "{output}");
    assert!(
        output.starts_with("OVER_LIMIT\ndescriptor 0: OVER_LIMIT limit=2/minute"),
        "{output}"
    );
    // No rule for this descriptor.
    let (code, output) = check(&["--addr", &server.grpc, "--domain", "edge", "path=/"]).await;
    assert_eq!(
        (code, output.as_str()),
        (0, "OK\ndescriptor 0: OK no limit\n")
    );
    // An invalid request is an error.
    let (code, _) = check(&["--addr", &server.grpc, "--domain", "", "k=v"]).await;
    assert_eq!(code, 2);

    let health = common::http(
        server.http.parse().expect("an address"),
        "GET",
        "/healthcheck",
        "",
    )
    .await;
    assert_eq!(health.status, 200);

    // SIGTERM: the server drains and exits successfully.
    let pid = server.child.id().expect("running").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(killed.success());
    let status = timeout(BOUND, server.child.wait())
        .await
        .expect("exits in time")
        .expect("an exit status");
    assert!(status.success(), "{status:?}");
    let mut messages = Vec::new();
    while let Some(line) = server.logs.next_line().await.expect("logs") {
        let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON event");
        messages.push(
            event["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(messages, ["shutting down", "stopped"]);
    // Nothing logged the client's address.
    assert!(!messages.concat().contains("192.0.2.7"));
}

#[tokio::test]
async fn check_without_a_server_fails_with_exit_code_two() {
    // A port nothing listens on: bound, then released.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    drop(listener);
    let (code, output) = check(&[
        "--addr",
        &address,
        "--domain",
        "edge",
        "k=v",
        "--timeout",
        "2s",
    ])
    .await;
    assert_eq!((code, output.as_str()), (2, ""));
}

#[tokio::test]
async fn serve_refuses_an_invalid_configuration_and_exits_with_failure() {
    let dir = TempDir::new("cli-invalid");
    dir.write(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    );
    // Settings from the environment, as in a container.
    let output = timeout(
        BOUND,
        command()
            .arg("serve")
            .env("RUNLIMIT_SERVER_CONFIG_DIR", dir.path())
            .env("RUNLIMIT_SERVER_GRPC_ADDR", "127.0.0.1:0")
            .env("RUNLIMIT_SERVER_HTTP_ADDR", "127.0.0.1:0")
            .output(),
    )
    .await
    .expect("ends in time")
    .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let logs = String::from_utf8_lossy(&output.stderr);
    assert!(
        logs.contains("invalid rate limit unit 'fortnight'"),
        "{logs}"
    );
    assert!(logs.contains("edge.yaml"), "{logs}");
}

#[tokio::test]
async fn serve_refuses_a_short_secret_or_one_given_twice() {
    let dir = TempDir::new("cli-secret");
    dir.write("edge.yaml", RULES);
    let short = dir.path().join("short");
    std::fs::write(&short, "too short\n").expect("write");
    let long = dir.path().join("long");
    std::fs::write(&long, "a secret of at least thirty-two bytes, from a file").expect("write");
    for (file, env, says) in [
        (&short, None, "at least 32"),
        (
            &long,
            Some("a secret of at least thirty-two bytes, from the environment"),
            "give one",
        ),
    ] {
        let mut serve = command();
        serve
            .args([
                "serve",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
            ])
            .arg("--config-dir")
            .arg(dir.path())
            .arg("--secret-file")
            .arg(file);
        if let Some(secret) = env {
            serve.env("RUNLIMIT_SERVER_SECRET", secret);
        }
        let output = timeout(BOUND, serve.output())
            .await
            .expect("ends in time")
            .expect("runs");
        assert_eq!(output.status.code(), Some(1));
        let logs = String::from_utf8_lossy(&output.stderr);
        assert!(logs.contains(says), "{logs}");
        assert!(!logs.contains("thirty-two"), "{logs}");
    }
}
