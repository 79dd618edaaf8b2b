//! The command line: `homebased-worker <run-dir> [--job J] [--lanes L] [--lock-fd N] [--adopt]
//! [--spawned-at US]`,
//! or `homebased-worker --standby [<room>]` for a worker the daemon starts ahead of need.
//! A test build (`failpoints`) also takes `--clock-ahead-ms N` and `--clock-skips-pauses`
//! ([`crate::clock`]); a release build refuses them as unknown options.

use homebased_shared::ids::JobId;
use homebased_shared::worker_cmdline;
use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::PathBuf;

pub const USAGE: &str =
    "usage: homebased-worker <run-dir> [--job J] [--lanes L] [--lock-fd N] [--sweep-key-fd N] [--adopt] [--spawned-at US]
       homebased-worker --standby [<room>] [--sweep-key-fd N]

Runs one attempt of the step described by <run-dir>/run.json and records its end.
  --job J       the run's job id, and
  --lanes L     its lanes, comma-separated, as the daemon named them: checked against
                run.json before anything runs, and kept in this command line, where a daemon
                that lost the run finds which lanes it holds.
  --lock-fd N   fd N is an open, exclusively flocked description of <run-dir>/runner.lock
                handed over by the daemon; without it the worker takes the lock itself.
  --sweep-key-fd N  fd N is a pipe holding the key of the sweeps' shared readings of the
                process table, from the daemon; read and closed at start.
  --adopt       the attempt's worker vanished and left its container running: find that
                container, follow it to its end and record it, instead of starting one.
  --spawned-at US  when the daemon started this worker (microseconds since the epoch), kept
                in worker.json beside the worker's own start stamps for scripts/bench.
  --standby     wait on standard input, a socket from the daemon, for the arguments above
                and the run's descriptors, then run as if started with them; exit quietly
                when the daemon's end closes first. <room>, an argument of spaces only,
                is where the run's arguments are written once it has one, so that ps
                shows them.";

/// The exit status for a command line that cannot be understood.
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub run_dir: PathBuf,
    /// `--job`: the job `run.json` must name.
    pub job: Option<JobId>,
    /// `--lanes`: the lanes `run.json` must name, in its order, as one argument.
    pub lanes: Option<String>,
    pub lock_fd: Option<RawFd>,
    /// `--sweep-key-fd`: a pipe from the daemon holding the key of its workers' shared
    /// readings of the process table (`homebased_shared::sweep::SweepKey`), read and closed
    /// before the workload starts. Without it the worker's sweep reads the table alone.
    pub sweep_key_fd: Option<RawFd>,
    /// Adopt the container a vanished worker of this run left, instead of starting the step.
    pub adopt: bool,
    /// `--spawned-at`: the daemon's stamp of the fork, recorded in `worker.json`.
    pub spawned_at: Option<i64>,
    /// Set by a standby worker that took this run (never by a command line): its command line
    /// still says `--standby`, so before its workload starts it shows [`Args::argv`] instead
    /// (`crate::title`).
    pub retitle: bool,
    /// How this worker's clock runs ([`crate::clock`]): the system's but in a test build.
    pub clock: crate::clock::Setting,
}

impl Args {
    /// The arguments after `argv[0]` that start a fresh worker with these: what `ps` shows
    /// for it, naming the run by its directory.
    pub fn argv(&self) -> Vec<OsString> {
        let mut argv = vec![self.run_dir.clone().into_os_string()];
        if let Some(job) = self.job {
            argv.extend([worker_cmdline::JOB_FLAG.into(), job.to_string().into()]);
        }
        if let Some(lanes) = &self.lanes {
            argv.extend([worker_cmdline::LANES_FLAG.into(), lanes.into()]);
        }
        if let Some(fd) = self.lock_fd {
            argv.extend(["--lock-fd".into(), fd.to_string().into()]);
        }
        if self.adopt {
            argv.push("--adopt".into());
        }
        if let Some(at) = self.spawned_at {
            argv.extend(["--spawned-at".into(), at.to_string().into()]);
        }
        if self.clock.ahead_ms != 0 {
            argv.extend([
                "--clock-ahead-ms".into(),
                self.clock.ahead_ms.to_string().into(),
            ]);
        }
        if self.clock.skips_pauses {
            argv.push("--clock-skips-pauses".into());
        }
        argv
    }
}

/// Whether `arg` is the room a standby worker is started with for the command line of its
/// future run (`homebased_shared::standby::room`): spaces only.
fn is_room(arg: &str) -> bool {
    !arg.is_empty() && arg.bytes().all(|b| b == b' ')
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Help,
    Run(Args),
    /// `--standby`: the arguments arrive later, from the daemon (`crate::standby`); the
    /// sweep key's descriptor, if given, comes with this command line.
    Standby {
        sweep_key_fd: Option<RawFd>,
    },
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, String> {
    let mut run_dir = None;
    let mut job = None;
    let mut lanes = None;
    let mut lock_fd = None;
    let mut sweep_key_fd = None;
    let mut adopt = false;
    let mut spawned_at = None;
    // Only a test build's arguments change it.
    #[cfg_attr(not(feature = "failpoints"), allow(unused_mut))]
    let mut clock = crate::clock::Setting::default();
    let mut standby = false;
    let mut room = false;
    let mut given = 0;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        given += 1;
        let text = arg.to_str();
        match text {
            Some("-h" | "--help") => return Ok(Invocation::Help),
            Some(homebased_shared::standby::STANDBY_FLAG) => standby = true,
            Some(t) if is_room(t) && !room => {
                room = true;
                given -= 1;
            }
            Some("--adopt") => adopt = true,
            Some(worker_cmdline::JOB_FLAG) => {
                let value = args.next().ok_or("--job needs a value")?;
                job = Some(
                    value
                        .to_str()
                        .and_then(|v| v.parse::<JobId>().ok())
                        .ok_or_else(|| format!("--job: {value:?} is not a job id"))?,
                );
            }
            Some(worker_cmdline::LANES_FLAG) => {
                let value = args.next().ok_or("--lanes needs a value")?;
                lanes = Some(
                    value
                        .into_string()
                        .map_err(|v| format!("--lanes: {v:?} is not text"))?,
                );
            }
            Some("--lock-fd") => {
                let value = args.next().ok_or("--lock-fd needs a value")?;
                lock_fd = Some(parse_fd(&value)?);
            }
            Some("--sweep-key-fd") => {
                let value = args.next().ok_or("--sweep-key-fd needs a value")?;
                sweep_key_fd = Some(parse_fd(&value)?);
                // Given to a standby worker as to a fresh one.
                given -= 1;
            }
            Some(t) if t.starts_with("--lock-fd=") => {
                lock_fd = Some(parse_fd(&OsString::from(&t["--lock-fd=".len()..]))?);
            }
            Some("--spawned-at") => {
                let value = args.next().ok_or("--spawned-at needs a value")?;
                spawned_at = Some(
                    value
                        .to_str()
                        .and_then(|v| v.parse::<i64>().ok())
                        .ok_or_else(|| format!("--spawned-at: {value:?} is not a number"))?,
                );
            }
            #[cfg(feature = "failpoints")]
            Some("--clock-ahead-ms") => {
                let value = args.next().ok_or("--clock-ahead-ms needs a value")?;
                clock.ahead_ms = value
                    .to_str()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("--clock-ahead-ms: {value:?} is not a number"))?;
            }
            #[cfg(feature = "failpoints")]
            Some("--clock-skips-pauses") => clock.skips_pauses = true,
            Some(t) if t.starts_with('-') => return Err(format!("unknown option {t}")),
            _ if run_dir.is_some() => return Err("only one run directory may be given".into()),
            _ => run_dir = Some(PathBuf::from(arg)),
        }
    }
    if standby {
        return if given == 1 {
            Ok(Invocation::Standby { sweep_key_fd })
        } else {
            Err("--standby takes no other arguments: they come from the daemon".into())
        };
    }
    if room {
        return Err("a blank argument (room for a command line) goes only with --standby".into());
    }
    let run_dir = run_dir.ok_or("the run directory is missing")?;
    Ok(Invocation::Run(Args {
        run_dir,
        job,
        lanes,
        lock_fd,
        sweep_key_fd,
        adopt,
        spawned_at,
        retitle: false,
        clock,
    }))
}

fn parse_fd(value: &OsString) -> Result<RawFd, String> {
    value
        .to_str()
        .and_then(|v| v.parse::<RawFd>().ok())
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| format!("--lock-fd: {value:?} is not a file descriptor number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Invocation, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn accepts_a_run_dir_with_and_without_a_lock_fd() {
        assert_eq!(
            parse_strs(&["/h/tasks/t"]).unwrap(),
            Invocation::Run(Args {
                run_dir: "/h/tasks/t".into(),
                job: None,
                lanes: None,
                lock_fd: None,
                sweep_key_fd: None,
                adopt: false,
                spawned_at: None,
                retitle: false,
                clock: Default::default(),
            })
        );
        assert_eq!(
            parse_strs(&["--lock-fd", "7", "/h/tasks/t"]).unwrap(),
            Invocation::Run(Args {
                run_dir: "/h/tasks/t".into(),
                job: None,
                lanes: None,
                lock_fd: Some(7),
                sweep_key_fd: None,
                adopt: false,
                spawned_at: None,
                retitle: false,
                clock: Default::default(),
            })
        );
        assert_eq!(
            parse_strs(&["/d", "--lock-fd=3"]).unwrap(),
            Invocation::Run(Args {
                run_dir: "/d".into(),
                job: None,
                lanes: None,
                lock_fd: Some(3),
                sweep_key_fd: None,
                adopt: false,
                spawned_at: None,
                retitle: false,
                clock: Default::default(),
            })
        );
        assert_eq!(
            parse_strs(&["/d", "--lock-fd", "3", "--adopt"]).unwrap(),
            Invocation::Run(Args {
                run_dir: "/d".into(),
                job: None,
                lanes: None,
                lock_fd: Some(3),
                sweep_key_fd: None,
                adopt: true,
                spawned_at: None,
                retitle: false,
                clock: Default::default(),
            })
        );
    }

    #[test]
    fn takes_the_runs_job_and_lanes_and_shows_them_again() {
        let job = JobId::new();
        let Invocation::Run(args) = parse_strs(&[
            "/h/tasks/t",
            "--job",
            &job.to_string(),
            "--lanes",
            "gpu0,gpu1",
        ])
        .unwrap() else {
            panic!("not a run");
        };
        assert_eq!(args.job, Some(job));
        assert_eq!(args.lanes.as_deref(), Some("gpu0,gpu1"));
        assert_eq!(parse(args.argv()).unwrap(), Invocation::Run(args));
        assert!(parse_strs(&["/d", "--job", "seven"]).is_err());
        assert!(parse_strs(&["/d", "--job"]).is_err());
        assert!(parse_strs(&["/d", "--lanes"]).is_err());
    }

    #[test]
    fn keeps_the_daemons_spawn_stamp() {
        let Invocation::Run(args) =
            parse_strs(&["/d", "--lock-fd", "3", "--spawned-at", "1796126640266073"]).unwrap()
        else {
            panic!("not a run");
        };
        assert_eq!(args.spawned_at, Some(1_796_126_640_266_073));
        assert_eq!(args.lock_fd, Some(3));
    }

    /// The test clock's arguments exist in a test build only: a release build refuses them.
    #[test]
    fn takes_the_test_clock_only_in_a_test_build() {
        let parsed = parse_strs(&["/d", "--clock-ahead-ms", "120000", "--clock-skips-pauses"]);
        if cfg!(feature = "failpoints") {
            let Ok(Invocation::Run(args)) = parsed else {
                panic!("not a run: {parsed:?}");
            };
            let clock = crate::clock::Setting {
                ahead_ms: 120_000,
                skips_pauses: true,
            };
            assert_eq!(args.clock, clock);
            // What ps shows starts a fresh worker on the same clock.
            let again = parse(args.argv()).unwrap();
            assert_eq!(again, Invocation::Run(args));
            assert!(parse_strs(&["/d", "--clock-ahead-ms", "soon"]).is_err());
        } else {
            assert_eq!(parsed, Err("unknown option --clock-ahead-ms".into()));
        }
    }

    #[test]
    fn refuses_what_it_cannot_understand() {
        assert!(parse_strs(&[]).is_err());
        assert!(parse_strs(&["/a", "/b"]).is_err());
        assert!(parse_strs(&["/a", "--lock-fd"]).is_err());
        assert!(parse_strs(&["/a", "--lock-fd", "-1"]).is_err());
        assert!(parse_strs(&["/a", "--lock-fd", "x"]).is_err());
        assert!(parse_strs(&["/a", "--verbose"]).is_err());
        assert!(parse_strs(&["/a", "--spawned-at"]).is_err());
        assert!(parse_strs(&["/a", "--spawned-at", "soon"]).is_err());
        assert_eq!(parse_strs(&["--help"]).unwrap(), Invocation::Help);
    }

    #[test]
    fn standby_stands_alone_or_with_room_for_its_runs_command_line() {
        assert_eq!(
            parse_strs(&["--standby"]).unwrap(),
            Invocation::Standby { sweep_key_fd: None }
        );
        assert_eq!(
            parse_strs(&["--standby", "--sweep-key-fd", "3"]).unwrap(),
            Invocation::Standby {
                sweep_key_fd: Some(3)
            }
        );
        assert_eq!(
            parse_strs(&["--standby", "      "]).unwrap(),
            Invocation::Standby { sweep_key_fd: None }
        );
        assert!(parse_strs(&["--standby", "/d"]).is_err());
        assert!(parse_strs(&["--standby", "  ", "  "]).is_err());
        assert!(parse_strs(&["/d", "--lock-fd", "3", "--standby"]).is_err());
        assert!(parse_strs(&["/d", "    "]).is_err());
    }

    #[test]
    fn a_runs_arguments_read_back_as_themselves() {
        for given in [
            &["/h/tasks/t"][..],
            &[
                "/h/tasks/t",
                "--lock-fd",
                "5",
                "--adopt",
                "--spawned-at",
                "17",
            ],
        ] {
            let Invocation::Run(args) = parse_strs(given).unwrap() else {
                panic!("not a run");
            };
            let argv = args.argv();
            assert_eq!(argv, given.iter().map(OsString::from).collect::<Vec<_>>());
            assert_eq!(parse(argv).unwrap(), Invocation::Run(args));
        }
    }
}
