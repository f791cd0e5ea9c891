//! `accord-lab`: the local lab (`accordd lab` runs this). See
//! docs/lab.md and [`accord_lab::cli`].

fn main() -> std::process::ExitCode {
    accord_lab::cli::main()
}
