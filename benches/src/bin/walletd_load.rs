//! `walletd-load`: drives a running walletd over HTTP/1.1 keep-alive connections and audits the
//! ledger afterwards; `walletd-load baseline-server` is the bare hyper server it is compared
//! with. See `walletd_benches::load` for the design and `scripts/bench-http.sh` for a full run.
//!
//! walletd must run with `WALLETD_RATE_LIMITS=off` for load.

use clap::Parser as _;
use walletd_benches::load::args::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Some(Command::BaselineServer(args)) => {
            match walletd_benches::load::baseline::serve(&args) {
                Ok(()) => 0,
                Err(error) => {
                    eprintln!("baseline-server: {error:#}");
                    2
                }
            }
        }
        None => walletd_benches::load::run::main(cli.load),
    };
    std::process::exit(code);
}
