//! The `homebased` command line: parse, run one command, print its result as JSON, ids or a
//! human view, and exit with the status of SPEC section 10.
//!
//! - [`args`]: the clap types.
//! - [`client`]: HTTP over the Unix socket.
//! - [`daemon_ctl`]: `daemon start|stop|restart|status`.
//! - [`render`]: human tables.
//! - [`files`]: commands that read the state home directly (`task log`, `events`).

pub mod args;
pub mod client;
pub mod daemon_ctl;
pub mod files;
pub mod render;

use args::{Cli, Command, ConfigCommand, DaemonCommand, JobCommand, ResourceCommand, TaskCommand};
use clap::Parser;
use client::{Client, Retry};
use homebased_shared::config::ConfigSource;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::{Home, HomeEnv};
use homebased_shared::ids::{JobId, OperationId};
use homebased_shared::wire::{JobDetail, JobList, Placement, ResourceList};
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
    pub raw: Option<Vec<u8>>,
}

impl Printed {
    pub fn new(json: Value, ids: Vec<String>, human: impl Into<String>) -> Printed {
        Printed {
            json,
            ids,
            human: human.into(),
            raw: None,
        }
    }

    /// An answer printed exactly as the daemon sent it.
    fn raw(bytes: &[u8]) -> Printed {
        Printed {
            json: Value::Null,
            ids: vec![],
            human: String::new(),
            raw: Some(bytes.to_vec()),
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
                eprintln!("{}", err.envelope());
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
                    Some(raw) => {
                        use std::io::Write;
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(raw).and_then(|()| out.write_all(b"\n"));
                    }
                    None => println!("{}", printed.json),
                },
                Output::Quiet => printed.ids.iter().for_each(|id| println!("{id}")),
                Output::Human => {
                    if !printed.human.is_empty() {
                        println!("{}", printed.human)
                    }
                }
            }
            0
        }
        Ok(None) => 0,
        Err(e) => {
            if output == Output::Json {
                eprintln!("{}", e.envelope());
            } else {
                eprintln!("homebased: {} ({})", e.message, e.code.as_str());
            }
            e.code.exit_code()
        }
    }
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
    let home = resolve_home(cli.home.as_deref())?;
    let config_source = ConfigSource::from_process(cli.config.as_deref());
    match cli.command {
        Command::Version => Ok(Some(version())),
        Command::Config(ConfigCommand::Validate) => config_validate(config_source).map(Some),
        Command::Resource(ResourceCommand::Schema) => Ok(Some(schema())),
        Command::Daemon(DaemonCommand::Serve { web_listen }) => {
            let config = load_config(config_source.as_ref())?;
            crate::daemon::serve(crate::daemon::ServeOptions {
                home,
                config,
                config_source,
                web_listen,
            })?;
            Ok(None)
        }
        Command::Daemon(cmd) => {
            if matches!(cmd, DaemonCommand::Start | DaemonCommand::Restart) {
                // Refuse a bad config here, before anything starts or stops.
                load_config(config_source.as_ref())?;
            }
            daemon_ctl::run(cmd, &home, &cli.home, &cli.config).map(Some)
        }
        Command::Task(TaskCommand::Log { task, tail, follow }) => {
            files::task_log(&home, &task, tail, follow)
        }
        Command::Events(args) => files::events(&home, &args, cli.json),
        Command::Resource(cmd) => {
            let client = Client::new(home.socket());
            runtime()?.block_on(resource(cmd, &client, cli.json))
        }
    }
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

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn version() -> Printed {
    let v = json!({
        "api_version": API_VERSION,
        "version": env!("CARGO_PKG_VERSION"),
        "git_revision": option_env!("HOMEBASED_GIT_REVISION"),
        "fleet_protocol_version": homebased_shared::FLEET_PROTOCOL_VERSION,
    });
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
    let v = json!({
        "api_version": API_VERSION,
        "path": path,
        "exists": exists,
        "valid": true,
        "settings": settings,
    });
    let n = &config.resource.notify_blocked_after;
    let human = format!(
        "config {} ({}): valid\nblocked notice after yield {}, after wait {}",
        path.as_ref()
            .map_or_else(|| "-".into(), |p| p.display().to_string()),
        if exists {
            "exists"
        } else {
            "missing, defaults apply"
        },
        humantime::format_duration(n.r#yield),
        humantime::format_duration(n.wait),
    );
    Ok(Printed::new(v, vec![], human))
}

fn parse_job(text: &str) -> ApiResult<JobId> {
    text.parse().map_err(|_| bad_input("job", text))
}

fn parse_operation(text: Option<String>) -> ApiResult<OperationId> {
    match text {
        // Without the flag, one id per invocation, reused for this CLI's own retries.
        None => Ok(OperationId::new()),
        Some(t) => t.parse().map_err(|_| bad_input("operation_id", &t)),
    }
}

fn bad_input(field: &str, value: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidQueueInput,
        format!("--{field}: {value:?} is not a full UUID"),
    )
    .with_input(json!({ field: value }))
}

/// `?machine=` for routes that take one.
fn machine_query(machine: &Option<String>) -> String {
    match machine {
        None => String::new(),
        Some(m) => format!("?machine={}", encode(m)),
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> ApiResult<T> {
    T::deserialize(v)
        .map_err(|e| ApiError::internal(format!("unexpected answer from the daemon: {e}")))
}

/// `as_json`: the answer is printed as it came, so long listings are not decoded into their
/// typed form for ids and tables nobody reads.
async fn resource(
    cmd: ResourceCommand,
    client: &Client,
    as_json: bool,
) -> ApiResult<Option<Printed>> {
    let printed = match cmd {
        ResourceCommand::List(m) => {
            let path = format!("/v1/resources{}", machine_query(&m.machine));
            if as_json {
                return Ok(Some(Printed::raw(&client.get_raw(&path).await?)));
            }
            let v = client.get(&path).await?;
            let list: ResourceList = decode(&v)?;
            let ids = list.resources.iter().map(|r| r.id.to_string()).collect();
            Printed::new(v, ids, render::resources(&list))
        }
        ResourceCommand::Jobs(m) => {
            let path = format!("/v1/jobs{}", machine_query(&m.machine));
            if as_json {
                return Ok(Some(Printed::raw(&client.get_raw(&path).await?)));
            }
            let v = client.get(&path).await?;
            let list: JobList = decode(&v)?;
            let ids = list.jobs.iter().map(|j| j.id.to_string()).collect();
            Printed::new(v, ids, render::jobs(&list))
        }
        ResourceCommand::Register { name, device } => {
            let body = json!({ "name": name, "device": device });
            let v = client.post("/v1/resources", &body, Retry::Once).await?;
            let id = v["id"].as_str().unwrap_or_default().to_string();
            let human = format!("registered {name} ({id})");
            Printed::new(v, vec![id], human)
        }
        ResourceCommand::Release {
            attention,
            operation_id,
            machine,
        } => {
            let attention: homebased_shared::ids::AttentionId = attention
                .parse()
                .map_err(|_| bad_input("attention", &attention))?;
            let op = parse_operation(operation_id)?;
            let body = json!({ "operation_id": op, "attention": attention });
            let path = format!("/v1/release{}", machine_query(&machine.machine));
            let v = client.post(&path, &body, Retry::Safe).await?;
            let human = format!(
                "released attention {attention} on resource {}",
                v["resource"].as_str().unwrap_or("?")
            );
            Printed::new(v, vec![attention.to_string()], human)
        }
        ResourceCommand::Schema => schema(),
        ResourceCommand::Job(cmd) => job(cmd, client).await?,
    };
    Ok(Some(printed))
}

/// `resource schema`: needs no daemon.
fn schema() -> Printed {
    let schema = homebased_shared::spec::json_schema();
    let human = pretty(&schema);
    Printed::new(schema, vec![], human)
}

async fn job(cmd: JobCommand, client: &Client) -> ApiResult<Printed> {
    match cmd {
        JobCommand::Submit {
            job_id,
            spec,
            allow_other_thread,
        } => {
            let id = match job_id {
                None => JobId::new(),
                Some(t) => t.parse().map_err(|_| bad_input("job-id", &t))?,
            };
            let body = submit_body(id, &spec, allow_other_thread)?;
            let v = client.post("/v1/jobs", &body, Retry::Safe).await?;
            let human = format!(
                "submitted {id}: {} at {} position {}",
                v["state"].as_str().unwrap_or("?"),
                v["priority"].as_str().unwrap_or("?"),
                v["position"]
            );
            Ok(Printed::new(v, vec![id.to_string()], human))
        }
        JobCommand::Show { job, machine } => {
            let id = parse_job(&job)?;
            let v = client
                .get(&format!("/v1/jobs/{id}{}", machine_query(&machine.machine)))
                .await?;
            let detail: JobDetail = decode(&v)?;
            let tasks = detail.runs.iter().map(|r| r.task.to_string());
            let ids = std::iter::once(id.to_string()).chain(tasks).collect();
            Ok(Printed::new(v.clone(), ids, render::job_detail(&detail)))
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
            let placement = Placement {
                front,
                back,
                priority,
                before,
                after,
            };
            let op = parse_operation(operation_id)?;
            let body = json!({ "operation_id": op, "placement": placement });
            let path = format!("/v1/jobs/{id}/move{}", machine_query(&machine.machine));
            let v = client.post(&path, &body, Retry::Safe).await?;
            let human = format!(
                "moved {id} to {} position {}",
                v["priority"].as_str().unwrap_or("?"),
                v["position"]
            );
            Ok(Printed::new(v, vec![id.to_string()], human))
        }
        JobCommand::Cancel {
            job,
            operation_id,
            machine,
        } => {
            let id = parse_job(&job)?;
            let op = parse_operation(operation_id)?;
            let body = json!({ "operation_id": op });
            let path = format!("/v1/jobs/{id}/cancel{}", machine_query(&machine.machine));
            let v = client.post(&path, &body, Retry::Safe).await?;
            let human = match v["result"].as_str() {
                Some("cancelled") => format!("cancelled {id}"),
                Some("stopping") => format!(
                    "stop requested for {id}: run {} on resource {}; cleanup is not yet done, \
                     check job show and resource list",
                    v["task"].as_str().unwrap_or("?"),
                    v["resource"].as_str().unwrap_or("?")
                ),
                _ => format!(
                    "{id} had already ended: {}",
                    v["state"].as_str().unwrap_or("?")
                ),
            };
            Ok(Printed::new(v, vec![id.to_string()], human))
        }
    }
}

/// Reads the spec and captures what the submitter's side contributes.
fn submit_body(id: JobId, spec_arg: &str, allow_other_thread: bool) -> ApiResult<Value> {
    let text = if spec_arg == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| ApiError::usage(format!("cannot read the spec from stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(spec_arg).map_err(|e| {
            ApiError::usage(format!("cannot read the spec file {spec_arg}: {e}"))
                .with_input(json!({ "spec": spec_arg }))
        })?
    };
    if text.len() > homebased_shared::spec::MAX_SPEC_BYTES {
        return Err(ApiError::new(
            ErrorCode::InvalidSpec,
            format!(
                "the spec is {} bytes; at most {} are accepted",
                text.len(),
                homebased_shared::spec::MAX_SPEC_BYTES
            ),
        )
        .with_input(json!({ "pointer": "", "value": null })));
    }
    let spec: Value = serde_json::from_str(&text).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidSpec,
            format!("the spec is not valid JSON: {e}"),
        )
        .with_input(json!({ "pointer": "", "value": null }))
    })?;
    let cwd = std::env::current_dir()
        .map_err(|e| ApiError::usage(format!("cannot read the working directory: {e}")))?;
    let parent_task: Option<homebased_shared::ids::TaskId> = std::env::var("HOMEBASED_TASK_ID")
        .ok()
        .and_then(|t| t.parse().ok());
    Ok(json!({
        "job": id,
        "spec": spec,
        "submitter": {
            "path": std::env::var("PATH").ok(),
            "home": std::env::var("HOME").ok(),
            "cwd": cwd,
            "parent_task": parent_task,
        },
        "allow_other_thread": allow_other_thread,
    }))
}
