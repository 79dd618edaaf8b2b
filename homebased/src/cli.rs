//! The `homebased` command line: parse, run one command, print its result as JSON, ids or a
//! human view, and exit with the status of SPEC section 10.
//!
//! - [`args`]: the clap types.
//! - [`completions`]: `completions bash|zsh|fish` and `man`, generated from [`args`].
//! - [`daemon_ctl`]: `daemon start|stop|restart|status`.
//! - [`render`]: human tables.
//! - [`service`]: `daemon install|uninstall`, and the lifecycle through the service manager.
//! - [`fleet`]: `fleet machines|probe|add|remove`.
//! - [`files`]: commands that read the state home directly (`task log`, `events`).
//! - [`event_rows`]: human `events`, a row per event.
//! - [`job_log`]: `resource job log`, every run of a job, followed on its authority.
//! - [`history`]: `history prune`.
//! - [`metrics`]: `metrics`, the daemon's Prometheus text.

pub mod args;
pub mod completions;
pub mod daemon_ctl;
pub mod event_rows;
pub mod files;
pub mod fleet;
pub mod history;
pub mod job_log;
pub mod metrics;
pub mod render;
pub mod service;
pub mod slurm;

use crate::client::Client;
use args::{Cli, Command, ConfigCommand, DaemonCommand, JobCommand, ResourceCommand, TaskCommand};
use clap::Parser;
use daemon_ctl::Lifecycle;
use homebased_shared::config::ConfigSource;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::{Home, HomeEnv};
use homebased_shared::ids::{AttentionId, JobId, MachineId, OperationId, TaskId};
use homebased_shared::wire::{
    CancelRequest, CancelResult, MoveRequest, Placement, RegisterRequest, ReleaseRequest,
    SubmitRequest, Submitter, Versioned,
};
use homebased_shared::API_VERSION;
use serde_json::{json, Value};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Human,
    Json,
    Quiet,
}

/// What a command produced: the JSON object, plus its ids and human form.
pub struct Printed {
    pub json: Value,
    pub ids: Vec<String>,
    pub human: String,
    /// The daemon's own bytes, printed instead of `json` under `--json` (long listings).
    pub raw: Option<hyper::body::Bytes>,
    /// A line for the person, on stderr after human output only (a log shown in part says
    /// so there, and a pipe of the log itself gets only the log).
    pub note: Option<String>,
}

impl Printed {
    pub fn new(json: Value, ids: Vec<String>, human: impl Into<String>) -> Printed {
        Printed {
            json,
            ids,
            human: human.into(),
            raw: None,
            note: None,
        }
    }

    /// [`Printed`] with a note for the person (see `note`).
    pub fn with_note(mut self, note: Option<String>) -> Printed {
        self.note = note;
        self
    }

    /// An answer in its versioned envelope. Under `--json` it prints as today's CLI always
    /// printed answers: through a `Value`, keys sorted.
    pub fn answer<T: serde::Serialize>(
        answer: &T,
        ids: Vec<String>,
        human: impl Into<String>,
    ) -> ApiResult<Printed> {
        let json = serde_json::to_value(Versioned::new(answer)).map_err(ApiError::internal)?;
        Ok(Printed::new(json, ids, human))
    }

    /// An answer printed exactly as the daemon sent it (not copied: a listing of 100,000
    /// jobs is 50 MB).
    fn raw(bytes: hyper::body::Bytes) -> Printed {
        Printed {
            json: Value::Null,
            ids: vec![],
            human: String::new(),
            raw: Some(bytes),
            note: None,
        }
    }
}

/// Runs the CLI and returns the process exit status.
pub fn main() -> i32 {
    let raw: Vec<String> = std::env::args().collect();
    let wants_json = raw.iter().any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&raw) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return 0;
            }
            if wants_json {
                let err = ApiError::usage(e.kind().to_string()).with_input(json!({
                    "detail": e.to_string().lines().next().unwrap_or_default()
                }));
                emit_err(&err.envelope().to_string());
            } else {
                let _ = e.print();
            }
            return ErrorCode::Usage.exit_code();
        }
    };
    let output = if cli.json {
        Output::Json
    } else if cli.quiet {
        Output::Quiet
    } else {
        Output::Human
    };
    match run(cli) {
        Ok(Some(printed)) => {
            match output {
                Output::Json => match &printed.raw {
                    Some(raw) => emit(raw),
                    None => emit(printed.json.to_string().as_bytes()),
                },
                Output::Quiet => {
                    if !printed.ids.is_empty() {
                        emit(printed.ids.join("\n").as_bytes())
                    }
                }
                Output::Human => {
                    if !printed.human.is_empty() {
                        emit(printed.human.as_bytes())
                    }
                    if let Some(note) = &printed.note {
                        emit_err(&format!("homebased: {note}"));
                    }
                }
            }
            0
        }
        Ok(None) => 0,
        Err(e) => {
            if output == Output::Json {
                emit_err(&e.envelope().to_string());
            } else {
                emit_err(&format!("homebased: {} ({})", e.message, e.code.as_str()));
            }
            e.code.exit_code()
        }
    }
}

/// Prints one result and a newline on stdout. A reader that went away (`| head -1`) is not
/// an error: `println!` would panic on the broken pipe; here the rest is dropped quietly.
/// Every result the CLI prints goes through here (or through `files`' follow loops, which
/// stop on the first failed write).
fn emit(bytes: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(bytes)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

/// Prints one error line on stderr, never panicking on a closed stderr.
fn emit_err(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// The resolved state home, or a usage error when not even `HOME` is known.
pub fn resolve_home(flag: Option<&std::path::Path>) -> ApiResult<Home> {
    Home::resolve(flag, &HomeEnv::from_process()).ok_or_else(|| {
        ApiError::usage("cannot find a state home: pass --home or set HOMEBASED_HOME or HOME")
    })
}

fn runtime() -> ApiResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ApiError::internal)
}

fn run(cli: Cli) -> ApiResult<Option<Printed>> {
    // Generated from the command definitions: they need no home.
    match cli.command {
        Command::Completions { shell } => return completions::completions(shell).map(Some),
        Command::Man => return completions::man().map(Some),
        _ => {}
    }
    let home = resolve_home(cli.home.as_deref())?;
    let config_source = ConfigSource::from_process(cli.config.as_deref());
    match cli.command {
        Command::Version => Ok(Some(version())),
        Command::Mcp => crate::mcp::serve(home).map(|()| None),
        Command::Completions { shell } => completions::completions(shell).map(Some),
        Command::Man => completions::man().map(Some),
        Command::Config(ConfigCommand::Validate) => config_validate(config_source).map(Some),
        Command::Slurm(cmd) => slurm::run(cmd, &home, config_source.as_ref()),
        Command::Daemon(DaemonCommand::Serve {
            web_listen,
            drain_within,
        }) => {
            let config = load_config(config_source.as_ref())?;
            crate::daemon::serve(crate::daemon::ServeOptions {
                home,
                config,
                config_source,
                web_listen,
                drain_within,
            })?;
            Ok(None)
        }
        Command::Daemon(DaemonCommand::Install {
            dry_run,
            web_listen,
        }) => {
            load_config(config_source.as_ref())?;
            let client = Client::socket(home.socket());
            runtime()?
                .block_on(service::install(
                    &home,
                    config_source.as_ref(),
                    dry_run,
                    web_listen,
                    &client,
                ))
                .map(Some)
        }
        Command::Daemon(DaemonCommand::Uninstall { yes }) => {
            let client = Client::socket(home.socket());
            runtime()?
                .block_on(service::uninstall(&home, yes, &client))
                .map(Some)
        }
        Command::Daemon(DaemonCommand::Settle) => {
            let client = Client::socket(home.socket());
            runtime()?.block_on(daemon_ctl::settle(&client)).map(Some)
        }
        Command::Daemon(DaemonCommand::Start) => {
            lifecycle(Lifecycle::Start, &home, &cli, config_source)
        }
        Command::Daemon(DaemonCommand::Stop { yes }) => {
            lifecycle(Lifecycle::Stop { yes }, &home, &cli, config_source)
        }
        Command::Daemon(DaemonCommand::Restart) => {
            lifecycle(Lifecycle::Restart, &home, &cli, config_source)
        }
        Command::Daemon(DaemonCommand::Status) => {
            lifecycle(Lifecycle::Status, &home, &cli, config_source)
        }
        Command::Task(TaskCommand::Log {
            task,
            tail,
            follow,
            raw,
            machine: None,
        }) => files::task_log(&home, &task, tail, follow, raw),
        Command::Task(TaskCommand::Log {
            task,
            tail,
            raw,
            machine: Some(machine),
            ..
        }) => {
            let client = Client::socket(home.socket());
            runtime()?
                .block_on(fleet::task_log(&client, &task, tail, raw, &machine))
                .map(Some)
        }
        Command::Events(args) => files::events(&home, &args, cli.json),
        Command::Resource(cmd) => {
            // `resource schema` needs no daemon: the client only connects when asked.
            let client = Client::socket(home.socket());
            runtime()?.block_on(resource(cmd, &client, &home, cli.json))
        }
        Command::Fleet(cmd) => {
            let client = Client::socket(home.socket());
            runtime()?.block_on(fleet::run(cmd, &client)).map(Some)
        }
        Command::History(cmd) => {
            let client = Client::socket(home.socket());
            runtime()?.block_on(history::run(cmd, &client)).map(Some)
        }
        Command::Metrics => {
            let client = Client::socket(home.socket());
            runtime()?.block_on(metrics::run(&client)).map(Some)
        }
    }
}

/// `daemon start|stop|restart|status`: through the service manager while a user service
/// serves this home (its manager starts and stops the daemon), else by this CLI.
fn lifecycle(
    verb: Lifecycle,
    home: &Home,
    cli: &Cli,
    config_source: Option<ConfigSource>,
) -> ApiResult<Option<Printed>> {
    if matches!(verb, Lifecycle::Start | Lifecycle::Restart) {
        // Refuse a bad config here, before anything starts or stops.
        load_config(config_source.as_ref())?;
    }
    let client = Client::socket(home.socket());
    runtime()?
        .block_on(async {
            match service::Installed::for_home(home)? {
                Some(installed) => service::lifecycle(verb, &installed, home, &client).await,
                None => daemon_ctl::run(verb, home, &cli.home, &cli.config, &client).await,
            }
        })
        .map(Some)
}

/// Reads the config; a missing or invalid explicit file is `config_invalid`.
pub fn load_config(source: Option<&ConfigSource>) -> ApiResult<homebased_shared::config::Config> {
    match source {
        None => Ok(Default::default()),
        Some(source) => source.load().map_err(|e| {
            ApiError::new(
                ErrorCode::ConfigInvalid,
                format!("{}: {e}", source.path.display()),
            )
            .with_input(json!({ "path": source.path }))
        }),
    }
}

/// An object the CLI makes itself, in the envelope every printed object carries. `v` is
/// always an object literal, which `json!` turns into a `Value` without fail.
fn versioned(v: Value) -> Value {
    json!(Versioned::new(v))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn version() -> Printed {
    let v = versioned(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "git_revision": option_env!("HOMEBASED_GIT_REVISION"),
        "fleet_protocol_version": homebased_shared::FLEET_PROTOCOL_VERSION,
    }));
    let human = format!(
        "homebased {} (api {API_VERSION}, fleet protocol {})",
        env!("CARGO_PKG_VERSION"),
        homebased_shared::FLEET_PROTOCOL_VERSION
    );
    Printed::new(v, vec![], human)
}

fn config_validate(source: Option<ConfigSource>) -> ApiResult<Printed> {
    let config = load_config(source.as_ref())?;
    let (path, exists) = match &source {
        Some(s) => (Some(s.path.clone()), s.path.exists()),
        None => (None, false),
    };
    let settings = serde_json::to_value(&config).map_err(ApiError::internal)?;
    let v = versioned(json!({
        "path": path,
        "exists": exists,
        "valid": true,
        "settings": settings,
    }));
    let mut human = format!(
        "config {} ({}): valid",
        path.as_ref()
            .map_or_else(|| "-".into(), |p| p.display().to_string()),
        if exists {
            "exists"
        } else {
            "missing, defaults apply"
        },
    );
    // Every effective setting, one `key = value` a line; the tokens only as set or not.
    let mut lines = Vec::new();
    setting_lines("", &settings, &mut lines);
    for (key, set) in [
        ("web.token", config.web.token.is_some()),
        ("fleet.token", config.fleet.token.is_some()),
    ] {
        lines.push(format!(
            "{key} = {}",
            if set { "(set)" } else { "(not set)" }
        ));
    }
    lines.sort();
    for line in lines {
        human.push('\n');
        human.push_str(&line);
    }
    Ok(Printed::new(v, vec![], human))
}

/// The settings as `a.b = value` lines: tables walked, every other value as JSON.
fn setting_lines(prefix: &str, value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(table) => {
            for (key, value) in table {
                let key = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                setting_lines(&key, value, out);
            }
        }
        other => out.push(format!("{prefix} = {other}")),
    }
}

/// The job of `show`, `move`, `cancel` and `log`: a positional argument, not a flag.
fn parse_job(text: &str) -> ApiResult<JobId> {
    text.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidQueueInput,
            format!("the job {text:?} is not a full UUID (ids are never shortened)"),
        )
        .with_input(json!({ "job": text }))
    })
}

fn parse_operation(text: Option<String>) -> ApiResult<OperationId> {
    match text {
        // Without the flag, one id per invocation, reused for this CLI's own retries.
        None => Ok(OperationId::new()),
        Some(t) => t.parse().map_err(|_| bad_input("operation_id", &t)),
    }
}

/// A flag's value that is not a full UUID; `field` is its key in `input` (`operation_id`),
/// named as the flag in words (`--operation-id`).
fn bad_input(field: &str, value: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidQueueInput,
        format!(
            "--{}: {value:?} is not a full UUID",
            field.replace('_', "-")
        ),
    )
    .with_input(json!({ field: value }))
}

/// `as_json`: a listing is printed as it came, so a long one is not decoded into its typed
/// form for ids and tables nobody reads.
async fn resource(
    cmd: ResourceCommand,
    client: &Client,
    home: &Home,
    as_json: bool,
) -> ApiResult<Option<Printed>> {
    let printed = match cmd {
        ResourceCommand::List(m) => {
            let reply = client.resource_list(m.machine.as_deref()).await?;
            if as_json {
                return Ok(Some(Printed::raw(reply.into_bytes())));
            }
            let list = reply.decode()?;
            let ids = list.resources.iter().map(|r| r.id.to_string()).collect();
            let human = render::resources(&list);
            Printed::answer(&list, ids, human)?
        }
        ResourceCommand::Jobs(m) => {
            if as_json {
                // Printed as it arrives, as `emit` would print it whole (a reader that went
                // away takes nothing more, quietly); a connection that breaks part way is an
                // error after what was printed, never a listing that looks whole.
                use std::io::Write;
                let mut out = std::io::stdout();
                let mut open = true;
                let mut print = |bytes: &[u8]| {
                    open = open && out.write_all(bytes).is_ok();
                    Ok(())
                };
                client
                    .job_list_streamed(m.machine.as_deref(), &mut print)
                    .await?;
                if open {
                    let _ = out.write_all(b"\n").and_then(|()| out.flush());
                }
                return Ok(None);
            }
            // Only what the table shows, asked for so and read a record at a time as it
            // arrives, each distinct waiting reason decoded once; and no JSON built back
            // from it, since none is printed here.
            let mut table = render::JobsTable::new();
            let mut read = |bytes: &[u8]| table.feed(bytes).map_err(std::io::Error::other);
            client
                .job_table_streamed(m.machine.as_deref(), &mut read)
                .await?;
            let human = table.finish().map_err(|e| {
                ApiError::internal(format!("unexpected answer from the daemon: {e}"))
            })?;
            let ids = table.ids().map(str::to_string).collect();
            Printed::new(Value::Null, ids, human)
        }
        ResourceCommand::Register { name, device } => {
            let view = client.register(&RegisterRequest { name, device }).await?;
            let human = format!("registered {} ({})", view.name, view.id);
            Printed::answer(&view, vec![view.id.to_string()], human)?
        }
        ResourceCommand::Release {
            attention,
            operation_id,
            machine,
        } => {
            let attention: AttentionId = attention
                .parse()
                .map_err(|_| bad_input("attention", &attention))?;
            let req = ReleaseRequest {
                operation_id: parse_operation(operation_id)?,
                attention,
            };
            let released = client.release(machine.machine.as_deref(), &req).await?;
            let human = format!(
                "released attention {attention} on resource {}",
                released.answer.resource
            );
            Printed::answer(&released, vec![attention.to_string()], human)?
        }
        ResourceCommand::Schema => schema(),
        ResourceCommand::Job(cmd) => return job(cmd, client, home).await,
    };
    Ok(Some(printed))
}

/// `resource schema`: needs no daemon.
fn schema() -> Printed {
    let schema = homebased_shared::spec::json_schema();
    let human = pretty(&schema);
    Printed::new(schema, vec![], human)
}

async fn job(cmd: JobCommand, client: &Client, home: &Home) -> ApiResult<Option<Printed>> {
    let printed = match cmd {
        JobCommand::Submit {
            job_id,
            spec,
            allow_other_thread,
            after,
            time_limit,
            machine,
        } => {
            let id = match job_id {
                None => JobId::new(),
                Some(t) => t.parse().map_err(|_| bad_input("job-id", &t))?,
            };
            let after = after
                .iter()
                .map(|t| t.parse().map_err(|_| bad_input("after", t)))
                .collect::<ApiResult<Vec<JobId>>>()?;
            let mut request = submit_request(id, &spec, allow_other_thread, machine.machine)?;
            merge_after(&mut request.spec, &after)?;
            if let Some(limit) = &time_limit {
                merge_time_limit(&mut request.spec, limit)?;
            }
            let remote = request.machine.is_some() || request.spec.get("machine").is_some();
            let submitted = client
                .submit(&request)
                .await
                .map_err(|e| name_the_job(e, id, "--job-id"))?;
            // A submit through Fleet says where the job went, as `fleet machines` names it.
            let place = if remote {
                let names = machine_names(client).await;
                format!(" on {}", render::machine_name(submitted.machine, &names))
            } else {
                String::new()
            };
            let human = format!(
                "submitted {id}{place}: {} at {} position {}",
                submitted.state,
                submitted.priority,
                json!(submitted.position)
            );
            Printed::answer(&submitted, vec![id.to_string()], human)
        }
        // Read from the run directories, and printed as it is read.
        JobCommand::Log {
            job,
            tail,
            follow,
            raw,
            machine,
        } => {
            let asked = job_log::Asked {
                tail,
                follow,
                raw,
                machine: machine.machine,
            };
            return job_log::run(client, home, &job, asked).await;
        }
        JobCommand::Show { job, env, machine } => {
            let id = parse_job(&job)?;
            let detail = client.job_show(id, machine.machine.as_deref()).await?;
            let tasks = detail.runs.iter().map(|r| r.task.to_string());
            let ids = std::iter::once(id.to_string()).chain(tasks).collect();
            let names = match detail.origin {
                Some(_) => machine_names(client).await,
                None => std::collections::HashMap::new(),
            };
            // Lane names for a pinned target and a waiting reason, which carry UUIDs.
            let active = matches!(
                detail.state,
                homebased_shared::wire::JobStateView::Active { .. }
            );
            let lanes = if detail.waiting.is_some()
                || active
                || detail.target != homebased_shared::wire::JobTarget::Any
            {
                // The job's authority's lanes (this machine, or the peer that answered).
                lane_names(client, Some(&detail.machine.to_string())).await
            } else {
                std::collections::HashMap::new()
            };
            let mut human = render::job_detail(&detail, &names, &lanes);
            if !env {
                return Printed::answer(&detail, ids, human).map(Some);
            }
            if machine.machine.is_some() {
                return Err(ApiError::usage(
                    "--env reads the environment stored on this machine; run it on the job's \
                     authority without --machine",
                ));
            }
            let stored = client.job_environment(id).await?;
            human.push_str(&render::environment(stored.environment.as_ref()));
            let mut answer = serde_json::to_value(&detail).map_err(ApiError::internal)?;
            answer["environment"] = json!(stored.environment);
            Printed::answer(&answer, ids, human)
        }
        JobCommand::Move {
            job,
            front,
            back,
            priority,
            before,
            after,
            operation_id,
            machine,
        } => {
            let id = parse_job(&job)?;
            let priority = priority
                .map(|p| {
                    p.parse().map_err(|m: String| {
                        ApiError::new(ErrorCode::InvalidQueueInput, m)
                            .with_input(json!({ "priority": p }))
                    })
                })
                .transpose()?;
            let before = before
                .map(|b| b.parse().map_err(|_| bad_input("before", &b)))
                .transpose()?;
            let after = after
                .map(|a| a.parse().map_err(|_| bad_input("after", &a)))
                .transpose()?;
            let req = MoveRequest {
                operation_id: parse_operation(operation_id)?,
                placement: Placement {
                    front,
                    back,
                    priority,
                    before,
                    after,
                },
            };
            let moved = client
                .job_move(id, machine.machine.as_deref(), &req)
                .await?;
            let human = format!(
                "moved {id} to {} position {}",
                moved.answer.priority, moved.answer.position
            );
            Printed::answer(&moved, vec![id.to_string()], human)
        }
        JobCommand::Cancel {
            job,
            operation_id,
            machine,
        } => {
            let id = parse_job(&job)?;
            let req = CancelRequest {
                operation_id: parse_operation(operation_id)?,
            };
            let result = client
                .job_cancel(id, machine.machine.as_deref(), &req)
                .await?;
            let human = match &result.answer {
                CancelResult::Cancelled => format!("cancelled {id}"),
                CancelResult::Stopping { resource, task } => format!(
                    "stop requested for {id}: run {task} on resource {resource}; cleanup is not \
                     yet done, check job show and resource list"
                ),
                CancelResult::AlreadyTerminal { state } => {
                    format!("{id} had already ended: {state}")
                }
            };
            Printed::answer(&result, vec![id.to_string()], human)
        }
    };
    printed.map(Some)
}

/// The environment host steps will run with: every variable of this CLI (Slurm and pueue do
/// the same) but the run variables, which the queue owns. A name or value that is not UTF-8
/// cannot travel in JSON and is left out.
fn captured_environment() -> std::collections::BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !homebased_shared::rundir::is_run_variable(k))
        .collect()
}

/// Lane names by UUID from `resource list`; empty when it cannot be read (a line then
/// names the UUID).
async fn lane_names(
    client: &Client,
    machine: Option<&str>,
) -> std::collections::HashMap<homebased_shared::ids::ResourceId, String> {
    match client.resource_list(machine).await {
        Ok(reply) => reply.decode().map_or_else(
            |_| std::collections::HashMap::new(),
            |l| l.resources.into_iter().map(|r| (r.id, r.name)).collect(),
        ),
        Err(_) => std::collections::HashMap::new(),
    }
}

/// Machine names by UUID from `fleet machines`, for human lines; empty where Fleet is off or
/// the directory cannot be read (a line then names the UUID alone).
async fn machine_names(client: &Client) -> std::collections::HashMap<MachineId, String> {
    match client.fleet_machines().await {
        Ok(list) => list
            .machines
            .into_iter()
            .filter_map(|m| Some((m.machine?, m.name?)))
            .collect(),
        Err(_) => std::collections::HashMap::new(),
    }
}

/// A retryable failure may have reached the daemon, or a slow peer, all the same: the job
/// may exist, or come to exist when that peer wakes. The id made before the first attempt is
/// named (`input.job`, and in words), so that the retry carries it and can never make a
/// second job (SPEC 2). `how` names the way to pass it (`--job-id`, the MCP tool's `job_id`).
pub(crate) fn name_the_job(mut e: ApiError, id: JobId, how: &str) -> ApiError {
    if !e.retryable {
        return e;
    }
    e.message = format!(
        "{}; the job may have been submitted all the same: retry with {how} {id}",
        e.message
    );
    match &mut e.input {
        serde_json::Value::Object(input) => {
            input.insert("job".into(), json!(id));
        }
        other => *other = json!({ "job": id }),
    }
    e
}

/// Puts the `--after` jobs into the spec: the spec's own `after`, if it has one, must name
/// the same jobs (in any order; the spec's order is kept). A spec entry that is not a job
/// UUID is left for the daemon to refuse with its pointer.
fn merge_after(spec: &mut serde_json::Value, flags: &[JobId]) -> ApiResult<()> {
    if flags.is_empty() {
        return Ok(());
    }
    let Some(object) = spec.as_object_mut() else {
        return Ok(());
    };
    let given = object.get("after").filter(|v| !v.is_null());
    match given {
        None => {
            object.insert("after".into(), json!(flags));
            Ok(())
        }
        Some(list) => {
            let named: Option<std::collections::BTreeSet<JobId>> = list.as_array().and_then(|l| {
                l.iter()
                    .map(|v| v.as_str().and_then(|t| t.parse().ok()))
                    .collect()
            });
            let flagged: std::collections::BTreeSet<JobId> = flags.iter().copied().collect();
            match named {
                Some(named) if named != flagged => Err(ApiError::new(
                    ErrorCode::InvalidSpec,
                    "/after: --after and the spec's after name different jobs; give the same \
                     jobs, or only one of them",
                )
                .with_input(json!({ "pointer": "/after", "value": list, "flags": flags }))),
                _ => Ok(()),
            }
        }
    }
}

/// Puts `--time-limit` into the spec: a spec with its own `time_limit` must say the same
/// duration (however it is spelled). The value itself is the daemon's to check, so that a bad
/// one is refused with the spec's pointer, as if written there.
fn merge_time_limit(spec: &mut serde_json::Value, flag: &str) -> ApiResult<()> {
    let Some(object) = spec.as_object_mut() else {
        return Ok(());
    };
    match object.get("time_limit").filter(|v| !v.is_null()) {
        None => {
            object.insert("time_limit".into(), json!(flag));
            Ok(())
        }
        Some(given) => {
            let same = |text: Option<&str>| text.and_then(|t| humantime::parse_duration(t).ok());
            match (same(given.as_str()), same(Some(flag))) {
                (Some(a), Some(b)) if a == b => Ok(()),
                _ => Err(ApiError::new(
                    ErrorCode::InvalidSpec,
                    "/time_limit: --time-limit and the spec's time_limit differ; give the same \
                     duration, or only one of them",
                )
                .with_input(json!({ "pointer": "/time_limit", "value": given, "flag": flag }))),
            }
        }
    }
}

/// Reads the spec and captures what the submitter's side contributes.
fn submit_request(
    id: JobId,
    spec_arg: &str,
    allow_other_thread: bool,
    machine: Option<String>,
) -> ApiResult<SubmitRequest> {
    let raw = read_spec_arg(spec_arg)?;
    let spec = homebased_shared::spec::read_json(&raw)?;
    Ok(SubmitRequest {
        job: id,
        spec,
        submitter: submitter()?,
        allow_other_thread,
        machine,
    })
}

/// The bytes of `--spec FILE|-`, at most one byte past the spec limit. Bytes, not a String:
/// a spec that is not UTF-8 is `invalid_spec`, said by the spec reader; one byte past the
/// limit is enough for it to refuse the size.
pub(crate) fn read_spec_arg(spec_arg: &str) -> ApiResult<Vec<u8>> {
    let limit = homebased_shared::spec::MAX_SPEC_BYTES as u64 + 1;
    let mut raw = Vec::new();
    if spec_arg == "-" {
        std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin(), limit), &mut raw)
            .map_err(|e| ApiError::usage(format!("cannot read the spec from stdin: {e}")))?;
    } else {
        std::fs::File::open(spec_arg)
            .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, limit), &mut raw))
            .map_err(|e| {
                ApiError::usage(format!("cannot read the spec file {spec_arg}: {e}"))
                    .with_input(json!({ "spec": spec_arg }))
            })?;
    }
    Ok(raw)
}

/// What the submitting side contributes, captured from this process now: its `PATH`, `HOME`,
/// working directory, parent run and whole environment (the CLI's; under `homebased mcp`,
/// the agent's, which started it).
pub(crate) fn submitter() -> ApiResult<Submitter> {
    let cwd = std::env::current_dir()
        .map_err(|e| ApiError::usage(format!("cannot read the working directory: {e}")))?;
    let parent_task: Option<TaskId> = std::env::var("HOMEBASED_TASK_ID")
        .ok()
        .and_then(|t| t.parse().ok());
    Ok(Submitter {
        path: std::env::var("PATH").ok(),
        home: std::env::var("HOME").ok(),
        cwd,
        parent_task,
        env: Some(captured_environment()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_limit_flag_fills_the_spec_or_must_agree_with_it() {
        let mut spec = json!({"name": "train"});
        merge_time_limit(&mut spec, "2h").unwrap();
        assert_eq!(spec["time_limit"], "2h");
        // The same duration spelled otherwise agrees; another one is refused with the pointer.
        let mut spec = json!({"time_limit": "120m"});
        merge_time_limit(&mut spec, "2h").unwrap();
        assert_eq!(
            spec["time_limit"], "120m",
            "the spec's own spelling is kept"
        );
        let err = merge_time_limit(&mut json!({"time_limit": "1h"}), "2h").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidSpec);
        assert_eq!(err.input["pointer"], "/time_limit");
        // A bad flag alone goes into the spec, for the daemon to refuse at /time_limit.
        let mut spec = json!({"time_limit": null});
        merge_time_limit(&mut spec, "soon").unwrap();
        assert_eq!(spec["time_limit"], "soon");
    }
}
