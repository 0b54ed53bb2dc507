//! `walletd`: parses the command line and runs it (see `api::cli`).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match api::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("walletd: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
