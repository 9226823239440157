//! The built binary: started with settings from the test only, and a
//! `serve` process whose addresses are read from its log.

use std::{process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, ChildStderr, Command},
    time::timeout,
};

use super::TempDir;

/// The built binary.
pub const BINARY: &str = env!("CARGO_BIN_EXE_runlimit-server");

/// The longest a test waits for the binary to do what it should do at once.
pub const BOUND: Duration = Duration::from_secs(20);

/// The binary, without any setting from the environment.
pub fn command() -> Command {
    let mut command = Command::new(BINARY);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("RUNLIMIT_SERVER_") {
            command.env_remove(name);
        }
    }
    command.kill_on_drop(true);
    command
}

/// A `serve` process and its addresses.
pub struct Serving {
    pub child: Child,
    pub logs: tokio::io::Lines<BufReader<ChildStderr>>,
    pub grpc: String,
    pub http: String,
}

/// Starts `serve` on loopback ports with the rules in `dir` and `extra`
/// flags, and waits until it serves.
pub async fn serve(dir: &TempDir, extra: &[&str]) -> Serving {
    let mut child = command()
        .args(["serve", "--log-format", "json", "--config-dir"])
        .arg(dir.path())
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut logs = BufReader::new(child.stderr.take().expect("piped")).lines();
    let serving = timeout(BOUND, async {
        while let Some(line) = logs.next_line().await.expect("logs") {
            let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON event");
            if event["fields"]["message"] == "serving" {
                return event["fields"].clone();
            }
        }
        panic!("the server ended before serving");
    })
    .await
    .expect("serving in time");
    let address = |name: &str| serving[name].as_str().expect("an address").to_owned();
    Serving {
        grpc: address("grpc"),
        http: address("http"),
        child,
        logs,
    }
}
