//! The command line of SPEC section 2, as clap types.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "homebased",
    version,
    about = "Per-machine GPU job queue",
    disable_help_subcommand = true
)]
pub struct Cli {
    /// The state home (default: HOMEBASED_HOME, $XDG_STATE_HOME/homebased, ~/.local/state/homebased).
    #[arg(long, global = true, value_name = "PATH")]
    pub home: Option<PathBuf>,
    /// The config file (default: HOMEBASED_CONFIG, ~/.config/homebased/config.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print one JSON object per command.
    #[arg(long, global = true, conflicts_with = "quiet")]
    pub json: bool,
    /// Print only ids, one per line.
    #[arg(long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run and control the daemon.
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// Resources, the queue and jobs.
    #[command(subcommand)]
    Resource(ResourceCommand),
    /// Read a run's output.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Read a thread's event inbox.
    Events(EventsArgs),
    /// Check the configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The Fleet directory: this machine and the peers it can address.
    #[command(subcommand)]
    Fleet(super::fleet::FleetCommand),
    /// Finished jobs: remove old history (see also `[history] keep`).
    #[command(subcommand)]
    History(super::history::HistoryCommand),
    /// Run a job spec on Slurm: sbatch, with the run directory contract kept.
    #[command(subcommand)]
    Slurm(super::slurm::SlurmCommand),
    /// Print the daemon's Prometheus metrics (the text of GET /metrics).
    Metrics,
    /// Serve the Model Context Protocol on stdio for a coding agent (its client starts it:
    /// {"command":"homebased","args":["mcp"]}).
    Mcp,
    /// Version, git revision, API and Fleet protocol versions.
    Version,
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print the man page (roff).
    Man,
}

/// The shells `completions` writes for.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Run the daemon in the foreground.
    Serve {
        /// TCP address for the web listener, or `off`.
        #[arg(long, value_name = "ADDR|off", env = "HOMEBASED_WEB_LISTEN")]
        web_listen: Option<String>,
        /// On SIGUSR1 (what `sbatch --signal=B:USR1@N` sends before an allocation ends):
        /// start nothing new, ask every run to yield (or stop, to restart later), wait this
        /// long for them, then exit with the queue kept. Such as 90s or 5m.
        #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = humantime::parse_duration)]
        drain_within: std::time::Duration,
    },
    /// Start the daemon in the background; returns once its socket answers.
    Start,
    /// Stop the daemon. Refuses while jobs are queued or active unless --yes.
    Stop {
        /// Cancel queued and active jobs first and wait for their cleanup.
        #[arg(long)]
        yes: bool,
    },
    /// Stop and start the daemon without touching running work (loads changed settings).
    Restart,
    /// Whether the daemon runs; works with the daemon down.
    Status,
    /// Run the daemon of this home as a user service (systemd, or launchd on macOS).
    Install {
        /// Print the unit and the commands; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// TCP address for the service's web listener.
        #[arg(long, value_name = "ADDR")]
        web_listen: Option<String>,
    },
    /// Stop and remove the user service. Refuses while jobs are queued or active unless --yes.
    Uninstall {
        /// Cancel queued and active jobs first and wait for their cleanup.
        #[arg(long)]
        yes: bool,
    },
    /// Wait until the daemon has run its timers and a scheduling pass after everything
    /// sent before (for tests and scripts that check that something did not happen).
    #[command(hide = true)]
    Settle,
}

#[derive(Subcommand, Debug)]
pub enum ResourceCommand {
    /// Resources and their active run phase.
    List(MachineArg),
    /// Queued and active jobs in serving order.
    Jobs(MachineArg),
    /// Add a manual lane (local only).
    Register {
        #[arg(long)]
        name: String,
        /// CUDA device index exported as CUDA_VISIBLE_DEVICES.
        #[arg(long)]
        device: Option<u32>,
    },
    /// Clear an Attention hold after a person checked the machine.
    Release {
        #[arg(long, value_name = "ATTENTION")]
        attention: String,
        #[arg(long, value_name = "UUID")]
        operation_id: Option<String>,
        #[command(flatten)]
        machine: MachineArg,
    },
    /// Print the JSON Schema of the job spec.
    Schema,
    /// Submit, inspect, move and cancel jobs.
    #[command(subcommand)]
    Job(JobCommand),
}

#[derive(Args, Debug, Clone, Default)]
pub struct MachineArg {
    /// A Fleet machine name or UUID (default: local, or the job's saved authority).
    #[arg(long, value_name = "M")]
    pub machine: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Submit a job (socket only).
    Submit {
        /// Your own job UUID, so a retry after a lost reply is safe.
        #[arg(long, value_name = "J")]
        job_id: Option<String>,
        /// The spec file, or `-` for standard input.
        #[arg(long, value_name = "FILE|-")]
        spec: String,
        /// Allow a run to submit work into another thread than its own job's.
        #[arg(long)]
        allow_other_thread: bool,
        /// Start only after job J has succeeded (repeatable; cancelled if J fails or is
        /// cancelled). With the spec's `after` too, both must name the same jobs.
        #[arg(long = "after", value_name = "J")]
        after: Vec<String>,
        /// Stop each run still executing this long after its start and fail the job
        /// (1m to 30d, e.g. 2h); the run is told when in HOMEBASED_DEADLINE. With the spec's
        /// `time_limit` too, both must say the same.
        #[arg(long = "time-limit", value_name = "DURATION")]
        time_limit: Option<String>,
        /// Submit to this Fleet machine (name or UUID); must agree with the spec's machine.
        #[command(flatten)]
        machine: MachineArg,
    },
    /// The job, its slot, every run with its task UUID, cleanup results and events.
    Show {
        job: String,
        /// Also print the environment captured at submit (it may hold secrets).
        #[arg(long)]
        env: bool,
        #[command(flatten)]
        machine: MachineArg,
    },
    /// Every run's output.log in order, each headed by its task, run number and step.
    Log {
        job: String,
        /// Only the last N lines of each run (at most 5000).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// Keep following across preemptions and steps until the job has ended.
        #[arg(long)]
        follow: bool,
        /// The bytes as written: carriage returns (progress-bar redraws) are not applied.
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        machine: MachineArg,
    },
    /// Change a job's level or position.
    Move {
        job: String,
        #[arg(long)]
        front: bool,
        #[arg(long)]
        back: bool,
        #[arg(long, value_name = "low|medium|high")]
        priority: Option<String>,
        #[arg(long, value_name = "J2")]
        before: Option<String>,
        #[arg(long, value_name = "J2")]
        after: Option<String>,
        #[arg(long, value_name = "UUID")]
        operation_id: Option<String>,
        #[command(flatten)]
        machine: MachineArg,
    },
    /// Cancel queued work, or request stop and cleanup of the active run.
    Cancel {
        job: String,
        #[arg(long, value_name = "UUID")]
        operation_id: Option<String>,
        #[command(flatten)]
        machine: MachineArg,
    },
}

#[derive(Subcommand, Debug)]
pub enum TaskCommand {
    /// A run's output.log.
    Log {
        task: String,
        /// Only the last N lines (at most 5000).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// Keep printing new output until the run ends.
        #[arg(long)]
        follow: bool,
        /// The bytes as written: carriage returns (progress-bar redraws) are not applied.
        #[arg(long)]
        raw: bool,
        /// Read it from a Fleet machine (through this machine's daemon; without --follow).
        #[arg(long, value_name = "M", conflicts_with = "follow")]
        machine: Option<String>,
    },
}

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// The thread UUID whose inbox to read.
    #[arg(long, value_name = "T")]
    pub thread: String,
    /// Skip the first SEQ lines of the inbox. Positions count the inbox's lines from 1
    /// across all of the thread's jobs (a job's own `seq` starts at 1 for every job);
    /// `--json` answers the last position read as `position`, to pass here next time.
    /// With --follow: skip the thread's first SEQ events.
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Keep printing the thread's events as the daemon records them, whatever the sink
    /// (with --json one event object per line), until interrupted; waits out a daemon
    /// restart.
    #[arg(long)]
    pub follow: bool,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the config path, whether it exists and the effective settings.
    Validate,
}
