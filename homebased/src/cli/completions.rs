//! `homebased completions bash|zsh|fish` and `homebased man`: generated from the same clap
//! definitions as `--help`, so they never drift from the commands.

use super::args::{Cli, CompletionShell};
use super::Printed;
use clap::CommandFactory;
use homebased_shared::error::{ApiError, ApiResult};
use serde_json::json;

/// The completion script of `shell`.
pub fn completions(shell: CompletionShell) -> ApiResult<Printed> {
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "homebased", &mut out);
    script(out, &shell.to_string())
}

/// The man page, roff: the top-level page followed by one section per subcommand, each
/// nested command named in full (`homebased resource job submit`).
pub fn man() -> ApiResult<Printed> {
    let cmd = Cli::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut out)
        .map_err(ApiError::internal)?;
    for (path, sub) in subcommands(&cmd, "homebased") {
        out.extend_from_slice(format!(".SH \"{}\"\n", path.to_uppercase()).as_bytes());
        let man = clap_mangen::Man::new(sub.clone().bin_name(path.clone()));
        man.render_description_section(&mut out)
            .and_then(|()| man.render_synopsis_section(&mut out))
            .and_then(|()| man.render_options_section(&mut out))
            .map_err(ApiError::internal)?;
    }
    script(out, "man")
}

/// Every visible subcommand, depth first, with its full path.
fn subcommands(cmd: &clap::Command, prefix: &str) -> Vec<(String, clap::Command)> {
    let mut all = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let path = format!("{prefix} {}", sub.get_name());
        all.push((path.clone(), sub.clone()));
        all.extend(subcommands(sub, &path));
    }
    all
}

/// Printed as it is: the script is the human output; `--json` wraps it.
fn script(bytes: Vec<u8>, kind: &str) -> ApiResult<Printed> {
    let text = String::from_utf8(bytes).map_err(ApiError::internal)?;
    let json = super::versioned(json!({ "kind": kind, "text": text }));
    Ok(Printed::new(json, vec![], text.trim_end().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_completion_offers_the_subcommands() {
        let bash = completions(CompletionShell::Bash).unwrap().human;
        for word in [
            "daemon",
            "resource",
            "install",
            "uninstall",
            "completions",
            "man",
        ] {
            assert!(bash.contains(word), "{word} in the bash completion");
        }
    }

    #[test]
    fn man_page_names_every_subcommand() {
        let man = man().unwrap().human;
        assert!(
            man.starts_with(".ie") || man.contains(".TH homebased"),
            "{man}"
        );
        for section in [
            "HOMEBASED DAEMON INSTALL",
            "HOMEBASED RESOURCE JOB SUBMIT",
            "HOMEBASED TASK LOG",
        ] {
            assert!(man.contains(section), "{section} in the man page");
        }
        assert!(
            !man.contains("HOMEBASED DAEMON SETTLE"),
            "hidden commands stay out"
        );
    }
}
