//! The user-service files of SPEC section 14, rendered by pure functions: a systemd user unit
//! and a launchd agent, both naming the home they serve so that a unit of another home is
//! recognised and never overwritten.

use std::path::{Path, PathBuf};

/// The systemd unit's file name (under `$XDG_CONFIG_HOME/systemd/user/`).
pub const SYSTEMD_UNIT: &str = "homebased.service";
/// The launchd agent's label (its plist is `~/Library/LaunchAgents/<label>.plist`).
pub const LAUNCHD_LABEL: &str = "homebased.daemon";
/// The comment line of a systemd unit that names its home.
const HOME_MARK: &str = "# homebased home: ";

/// What the service runs: every path absolute, the installer's `PATH` captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub exe: PathBuf,
    pub home: PathBuf,
    pub config: Option<PathBuf>,
    pub web_listen: Option<String>,
    pub path_env: String,
}

impl ServiceSpec {
    /// `homebased --home H [--config C] daemon serve [--web-listen A]`.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = vec![
            self.exe.display().to_string(),
            "--home".into(),
            self.home.display().to_string(),
        ];
        if let Some(c) = &self.config {
            argv.push("--config".into());
            argv.push(c.display().to_string());
        }
        argv.push("daemon".into());
        argv.push("serve".into());
        if let Some(w) = &self.web_listen {
            argv.push("--web-listen".into());
            argv.push(w.clone());
        }
        argv
    }
}

/// The systemd user unit. `KillMode=process`: the runs live in the service's cgroup, and
/// systemd's default (`control-group`) would kill every one of them on `stop` or `restart`.
pub fn systemd_unit(spec: &ServiceSpec) -> String {
    let exec: Vec<String> = spec.argv().iter().map(|a| systemd_word(a)).collect();
    let home = spec.home.display().to_string();
    format!(
        "# Written by `homebased daemon install`; `homebased daemon uninstall` removes it.\n\
         {HOME_MARK}{home}\n\
         [Unit]\n\
         Description=homebased GPU job queue ({desc})\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         # Runs live in this service's cgroup: stopping the service must never kill them.\n\
         KillMode=process\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         Environment={path}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        desc = home.replace('%', "%%"),
        exec = exec.join(" "),
        path = systemd_word(&format!("PATH={}", spec.path_env)),
    )
}

/// One word of a systemd command line or assignment: `%` and `$` are doubled (specifiers and
/// variable expansion), and a word with blanks, quotes or backslashes is double-quoted with
/// C escapes.
fn systemd_word(word: &str) -> String {
    let escaped = word.replace('%', "%%").replace('$', "$$");
    let needs_quotes = escaped.is_empty()
        || escaped
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'));
    if !needs_quotes {
        return escaped;
    }
    let mut out = String::from("\"");
    for c in escaped.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The home a systemd unit written by [`systemd_unit`] serves; `None` for a unit that
/// names none (written by hand).
pub fn systemd_unit_home(unit: &str) -> Option<PathBuf> {
    unit.lines()
        .find_map(|l| l.strip_prefix(HOME_MARK))
        .map(PathBuf::from)
}

/// The launchd agent: `AbandonProcessGroup` so that launchd leaves the runs alone when the
/// daemon exits, `KeepAlive` and `RunAtLoad` so that it runs from login on.
pub fn launchd_plist(spec: &ServiceSpec, log: &Path) -> String {
    let args: String = spec
        .argv()
        .iter()
        .map(|a| format!("    <string>{}</string>\n", xml(a)))
        .collect();
    let log = xml(&log.display().to_string());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \
         \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \x20 <key>Label</key>\n\
         \x20 <string>{LAUNCHD_LABEL}</string>\n\
         \x20 <key>HomebasedHome</key>\n\
         \x20 <string>{home}</string>\n\
         \x20 <key>ProgramArguments</key>\n\
         \x20 <array>\n\
         {args}\
         \x20 </array>\n\
         \x20 <key>EnvironmentVariables</key>\n\
         \x20 <dict>\n\
         \x20   <key>PATH</key>\n\
         \x20   <string>{path}</string>\n\
         \x20 </dict>\n\
         \x20 <key>RunAtLoad</key>\n\
         \x20 <true/>\n\
         \x20 <key>KeepAlive</key>\n\
         \x20 <true/>\n\
         \x20 <key>AbandonProcessGroup</key>\n\
         \x20 <true/>\n\
         \x20 <key>StandardOutPath</key>\n\
         \x20 <string>{log}</string>\n\
         \x20 <key>StandardErrorPath</key>\n\
         \x20 <string>{log}</string>\n\
         </dict>\n\
         </plist>\n",
        home = xml(&spec.home.display().to_string()),
        path = xml(&spec.path_env),
    )
}

/// The home a plist written by [`launchd_plist`] serves.
pub fn launchd_plist_home(plist: &str) -> Option<PathBuf> {
    let after = plist.split("<key>HomebasedHome</key>").nth(1)?;
    let start = after.find("<string>")? + "<string>".len();
    let end = after[start..].find("</string>")? + start;
    Some(PathBuf::from(unxml(&after[start..end])))
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn unxml(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&gt;", ">")
        .replace("&lt;", "<")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            exe: "/usr/local/bin/homebased".into(),
            home: "/home/me/.local/state/homebased".into(),
            config: None,
            web_listen: None,
            path_env: "/usr/local/bin:/usr/bin:/bin".into(),
        }
    }

    fn line<'a>(unit: &'a str, key: &str) -> &'a str {
        unit.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {unit}"))
    }

    #[test]
    fn systemd_unit_keeps_runs_alive_and_restarts_on_failure() {
        let unit = systemd_unit(&spec());
        assert_eq!(
            line(&unit, "ExecStart="),
            "ExecStart=/usr/local/bin/homebased --home /home/me/.local/state/homebased daemon serve"
        );
        assert_eq!(line(&unit, "KillMode="), "KillMode=process");
        assert_eq!(line(&unit, "Restart="), "Restart=on-failure");
        assert_eq!(
            line(&unit, "Environment="),
            "Environment=PATH=/usr/local/bin:/usr/bin:/bin"
        );
        assert_eq!(line(&unit, "WantedBy="), "WantedBy=default.target");
        assert_eq!(
            systemd_unit_home(&unit),
            Some(PathBuf::from("/home/me/.local/state/homebased"))
        );
    }

    #[test]
    fn systemd_unit_quotes_paths_with_spaces_and_escapes_specifiers() {
        let mut s = spec();
        s.exe = "/opt/my tools/homebased".into();
        s.home = "/data/100% state/home".into();
        s.path_env = "/opt/my tools:/bin:$HOME/bin".into();
        let unit = systemd_unit(&s);
        assert_eq!(
            line(&unit, "ExecStart="),
            "ExecStart=\"/opt/my tools/homebased\" --home \"/data/100%% state/home\" daemon serve"
        );
        assert_eq!(
            line(&unit, "Environment="),
            "Environment=\"PATH=/opt/my tools:/bin:$$HOME/bin\""
        );
        assert_eq!(
            line(&unit, "Description="),
            "Description=homebased GPU job queue (/data/100%% state/home)"
        );
        assert_eq!(
            systemd_unit_home(&unit),
            Some(PathBuf::from("/data/100% state/home"))
        );
    }

    #[test]
    fn systemd_unit_passes_the_config_and_the_web_listener() {
        let mut s = spec();
        s.config = Some("/home/me/my config/homebased.toml".into());
        s.web_listen = Some("127.0.0.1:7677".into());
        let unit = systemd_unit(&s);
        assert_eq!(
            line(&unit, "ExecStart="),
            "ExecStart=/usr/local/bin/homebased --home /home/me/.local/state/homebased \
             --config \"/home/me/my config/homebased.toml\" daemon serve --web-listen 127.0.0.1:7677"
        );
    }

    #[test]
    fn systemd_word_escapes_quotes_and_backslashes() {
        assert_eq!(systemd_word(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(systemd_word(""), "\"\"");
        assert_eq!(systemd_word("plain"), "plain");
    }

    #[test]
    fn unit_without_a_home_mark_names_no_home() {
        assert_eq!(systemd_unit_home("[Service]\nExecStart=/bin/true\n"), None);
    }

    #[test]
    fn launchd_plist_abandons_the_process_group_and_keeps_alive() {
        let mut s = spec();
        s.home = "/Users/me/state & <home>".into();
        s.web_listen = Some("127.0.0.1:7677".into());
        let plist = launchd_plist(&s, Path::new("/Users/me/state/daemon.log"));
        for key in ["RunAtLoad", "KeepAlive", "AbandonProcessGroup"] {
            assert!(
                plist.contains(&format!("<key>{key}</key>\n  <true/>")),
                "{key} true in {plist}"
            );
        }
        assert!(
            plist.contains("<string>homebased.daemon</string>"),
            "{plist}"
        );
        assert!(
            plist.contains(
                "    <string>--home</string>\n    <string>/Users/me/state &amp; &lt;home&gt;</string>\n"
            ),
            "{plist}"
        );
        assert!(plist.contains("<string>--web-listen</string>"), "{plist}");
        assert!(
            plist.contains("<key>PATH</key>\n    <string>/usr/local/bin:/usr/bin:/bin</string>")
        );
        assert_eq!(
            launchd_plist_home(&plist),
            Some(PathBuf::from("/Users/me/state & <home>"))
        );
    }
}
