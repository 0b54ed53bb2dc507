//! `walletd`: parses the command line and runs it (see `api::cli`).

fn main() -> std::process::ExitCode {
    match api::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("walletd: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
