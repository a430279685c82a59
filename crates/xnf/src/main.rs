//! `xnf`: parses the command line, runs it, prints an error in one line
//! (the commands are in [`xnf::cli`]).

fn main() -> std::process::ExitCode {
    let cli = xnf_core::runtime::parse_args::<xnf::cli::Cli>("xnf");
    xnf_core::runtime::exit_code("xnf", xnf::cli::run(cli))
}
