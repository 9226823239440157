//! Stores of a test's own: a `redis-server` and a PostgreSQL cluster on
//! free loopback ports, which a test may stop (SIGSTOP) and resume without
//! disturbing the shared services; and the shared services' addresses.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::TempDir;

/// Whether tests must have their services rather than skip.
pub fn required() -> bool {
    std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1")
}

/// Skips (returns `None` with a printed reason), or panics when services
/// are required.
pub fn skip<T>(reason: &str) -> Option<T> {
    assert!(!required(), "{reason} (RUNLIMIT_REQUIRE_SERVICES=1)");
    eprintln!("skipping: {reason}");
    None
}

/// The value of `variable`, or a skip.
pub fn service(variable: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => skip(&format!("{variable} is not set")),
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("an address")
        .port()
}

/// Sends `signal` (`STOP`, `CONT`) to `pids`: the first must receive it,
/// the others may have ended since they were listed.
pub fn signal(signal: &str, pids: &[u32]) {
    for (index, pid) in pids.iter().enumerate() {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status()
            .expect("kill runs");
        assert!(status.success() || index > 0, "kill -{signal} {pid}");
    }
}

/// A `redis-server` of the test's own, killed when dropped.
pub struct PrivateRedis {
    child: Child,
    pub url: String,
    pub port: u16,
}

impl PrivateRedis {
    /// Starts one on `port` (a free one when `None`), or a skip when
    /// `redis-server` is not installed.
    pub fn start(port: Option<u16>) -> Option<Self> {
        let port = port.unwrap_or_else(free_port);
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else {
            return skip("redis-server is not installed");
        };
        let url = format!("redis://127.0.0.1:{port}/");
        let server = Self { child, url, port };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server on port {port} did not start");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        // A stopped server must be resumed to die of SIGKILL's cleanup
        // promptly; SIGKILL works on a stopped process all the same.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL cluster of the test's own (`initdb`, `pg_ctl`), run as the
/// `postgres` user when the test runs as root; stopped and removed when
/// dropped.
pub struct PrivatePostgres {
    data: PathBuf,
    _dir: TempDir,
    pub url: String,
}

/// Runs a PostgreSQL program as `postgres` (through `runuser` when root).
fn as_postgres(program: &str) -> Command {
    let path = Path::new(POSTGRES_BIN).join(program);
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(path);
        command
    } else {
        Command::new(path)
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

impl PrivatePostgres {
    /// Creates and starts one on `port` (a free one when `None`), or a skip
    /// when PostgreSQL's programs are not installed.
    pub fn start(name: &str, port: Option<u16>) -> Option<Self> {
        if !Path::new(POSTGRES_BIN).join("initdb").exists() {
            return skip(&format!("{POSTGRES_BIN}/initdb is not installed"));
        }
        let dir = TempDir::new(name);
        let data = dir.path().join("data");
        if running_as_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(status.success(), "chown the cluster's directory");
        }
        let status = as_postgres("initdb")
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb runs");
        assert!(status.success(), "initdb");
        let port = port.unwrap_or_else(free_port);
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=200",
            dir.path().display()
        );
        let status = as_postgres("pg_ctl")
            .args(["-w", "-t", "60", "-D"])
            .arg(&data)
            .args(["-l"])
            .arg(dir.path().join("log"))
            .args(["-o", &options, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("pg_ctl runs");
        assert!(status.success(), "pg_ctl start");
        Some(Self {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            data,
            _dir: dir,
        })
    }

    /// The postmaster and every process it started.
    pub fn pids(&self) -> Vec<u32> {
        let pid_file = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .expect("the postmaster's pid file");
        let postmaster: u32 = pid_file
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .expect("a pid");
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (name) state ppid …`: the name may hold spaces.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Resumed first, in case the test stopped it and failed.
        let _ = Command::new("kill")
            .arg("-CONT")
            .args(self.pids().iter().map(u32::to_string))
            .stderr(Stdio::null())
            .status();
        let _ = as_postgres("pg_ctl")
            .args(["-m", "immediate", "-w", "-D"])
            .arg(&self.data)
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
