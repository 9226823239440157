//! `runlimit-server`: parses the command line, sets up logging, and runs
//! the command (see `runlimit_server::cli`).

use std::{io::IsTerminal, process::ExitCode};

use clap::Parser;
use runlimit_server::cli::{self, Cli, LogFormat};
use tracing_subscriber::fmt;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs = fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(cli.log_level);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        _ => logs.init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("runlimit-server: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli::run(cli))
}
