//! Shell completions and man pages, the same way for every Accord binary
//! (accordd, accordctl, accord-agent): each flattens [`DocsCommand`] into
//! its subcommands and hands it its own `clap::Command`.
//!
//! - `PROG completions bash|zsh|fish` writes the completion script to
//!   stdout (clap_complete);
//! - `PROG man --out DIR` (hidden) writes `PROG.N` and one page per
//!   subcommand, `PROG-SUB.N` (`accordctl-bios-apply.N` for nested ones),
//!   with clap_mangen. The packages (scripts/package) are built with it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The shells Accord ships completions for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The two subcommands every Accord binary has; `#[command(flatten)]` it
/// into the binary's own subcommand enum.
#[derive(Debug, clap::Subcommand)]
pub enum DocsCommand {
    /// Print this program's completion script for bash, zsh or fish.
    ///
    /// The packages install them. By hand, for bash: `PROG completions bash >
    /// ~/.local/share/bash-completion/completions/PROG` (PROG: this program).
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Write the man pages (this program's and one per subcommand) into DIR.
    #[command(hide = true)]
    Man {
        /// The directory to write the pages into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

impl DocsCommand {
    /// Carries the subcommand out for the program `cmd` (its
    /// `CommandFactory::command()`), whose man pages go in `section`
    /// ("1": user commands, "8": daemons and administration). `man` lists
    /// the files it wrote on stdout.
    pub fn run(self, cmd: clap::Command, section: &str) -> std::io::Result<()> {
        match self {
            DocsCommand::Completions { shell } => {
                let script = completions(cmd, shell);
                let mut out = std::io::stdout().lock();
                out.write_all(&script)?;
                out.flush()
            }
            DocsCommand::Man { out } => {
                for file in write_man_pages(cmd, section, &out)? {
                    println!("{}", file.display());
                }
                Ok(())
            }
        }
    }
}

/// The completion script for `cmd` in `shell`, for the program name
/// `cmd.get_name()`.
pub fn completions(mut cmd: clap::Command, shell: Shell) -> Vec<u8> {
    let name = cmd.get_name().to_owned();
    // Into memory first: clap_complete panics on a write error (a closed
    // pipe); this way `completions bash | head` fails like any output.
    let mut script = Vec::new();
    match shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, name, &mut script)
        }
        Shell::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, name, &mut script)
        }
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, name, &mut script)
        }
    }
    script
}

/// Writes `NAME.SECTION` for `cmd` and `NAME-SUB.SECTION` for every
/// subcommand that is not hidden (recursively; no page for `help`) into
/// `dir`, creating it. Returns the files written, the program's first.
pub fn write_man_pages(
    cmd: clap::Command,
    section: &str,
    dir: &Path,
) -> std::io::Result<Vec<PathBuf>> {
    fn walk(
        cmd: &clap::Command,
        section: &str,
        dir: &Path,
        written: &mut Vec<PathBuf>,
    ) -> std::io::Result<()> {
        let man = clap_mangen::Man::new(cmd.clone())
            .section(section)
            .manual("Accord")
            .source(format!(
                "Accord {}",
                cmd.get_version().unwrap_or(env!("CARGO_PKG_VERSION"))
            ));
        let path = dir.join(man.get_filename());
        let mut page = Vec::new();
        man.render(&mut page)?;
        std::fs::write(&path, page)?;
        written.push(path);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, section, dir, written)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    // Built once, from the top: subcommands get their display names
    // (`accordctl-plan`) and the version.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    walk(&cmd, section, dir, &mut written)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program() -> clap::Command {
        clap::Command::new("prog")
            .version("1.2.3")
            .about("A program")
            .subcommand(clap::Command::new("plan").about("Plan"))
            .subcommand(
                clap::Command::new("bios")
                    .about("BIOS")
                    .subcommand(clap::Command::new("apply").about("Apply")),
            )
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn completions_for_every_shell_name_the_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(completions(program(), shell)).unwrap();
            assert!(script.contains("prog"), "{shell:?}:\n{script}");
            assert!(script.contains("plan"), "{shell:?}:\n{script}");
        }
    }

    #[test]
    fn man_pages_for_the_program_and_each_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("accord-man-{}", std::process::id()));
        let written = write_man_pages(program(), "8", &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["prog.8", "prog-plan.8", "prog-bios.8", "prog-bios-apply.8"]
        );
        let page = std::fs::read_to_string(dir.join("prog-bios-apply.8")).unwrap();
        assert!(page.starts_with(".ie"), "{page}");
        assert!(page.contains(".TH prog-bios-apply 8"), "{page}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
