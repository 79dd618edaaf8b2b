//! The tools of SPEC section 15, as data: their names, the descriptions that teach an agent
//! the runbook's rules, their arguments as types, and the input schemas generated from those
//! types (the ids, `Placement` and the job spec's own schema are the API's, so the two cannot
//! drift). Pure: decoding arguments answers the error the CLI would, nothing is sent.

use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{JobId, OperationId, TaskId, ThreadId};
use homebased_shared::wire::Placement;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The longest `events_wait` waits (SPEC 15), and how long it waits when not told.
pub const MAX_WAIT: Duration = crate::api::threads::MAX_WAIT;
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// Rules every tool's description ends with, so an agent reading any one tool learns them.
const IDS: &str = "Ids are full UUIDs, never prefixes.";

// `resource_list`, `jobs` (no doc comment: it would be the schema's description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineArgs {
    /// A Fleet machine name or UUID; absent: this machine.
    #[serde(default)]
    pub machine: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitArgs {
    // The job spec, its schema exactly the one `resource schema` prints (a doc comment here
    // would replace that schema's own description).
    #[schemars(schema_with = "spec_schema")]
    pub spec: Value,
    /// The new job's UUID. Make one (v7 or v4) before the first attempt and pass the same
    /// one on every retry of this submit: the same id and spec answer the same job, never a
    /// second one. Absent: the server makes one and names it in a retryable error.
    #[serde(default)]
    #[schemars(with = "Option<JobId>")]
    pub job_id: Option<String>,
}

// `job_show`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowArgs {
    #[schemars(with = "JobId")]
    pub job: String,
    /// A Fleet machine name or UUID; absent: where the job was submitted to from here, else
    /// this machine.
    #[serde(default)]
    pub machine: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobLogArgs {
    #[schemars(with = "JobId")]
    pub job: String,
    /// At most this many last lines of each run's log (at most 5000; the last 1 MiB).
    #[serde(default)]
    pub tail: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskLogArgs {
    /// The run's task UUID (from `job_show`'s `runs`).
    #[schemars(with = "TaskId")]
    pub task: String,
    /// At most this many last lines (at most 5000; the last 1 MiB).
    #[serde(default)]
    pub tail: Option<usize>,
    /// The Fleet machine that ran it; absent: this machine.
    #[serde(default)]
    pub machine: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveArgs {
    #[schemars(with = "JobId")]
    pub job: String,
    /// Where to put it: `front`/`back` of its level, another `priority`, or `before`/
    /// `after` another job.
    pub placement: Placement,
    /// A new UUID for this move, kept and passed again on a retry after a lost reply.
    #[schemars(with = "OperationId")]
    pub operation_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    #[schemars(with = "JobId")]
    pub job: String,
    /// A new UUID for this cancel, kept and passed again on a retry after a lost reply.
    #[schemars(with = "OperationId")]
    pub operation_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsWaitArgs {
    /// The thread of the spec (where its jobs' events go).
    #[schemars(with = "ThreadId")]
    pub thread: String,
    /// The `cursor` of the previous answer; absent: from the thread's first event.
    #[serde(default)]
    pub after: Option<String>,
    /// How long to wait for an event, such as `90s` or `5m`: at most 5m, default 60s.
    #[serde(default)]
    pub timeout: Option<String>,
}

// `schema` takes nothing.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// One tool: its name, what it tells the agent, its input schema, and whether it changes
/// the queue.
pub struct ToolDef {
    pub name: &'static str,
    pub description: String,
    pub input_schema: Map<String, Value>,
    pub read_only: bool,
}

/// Every tool, in the order of SPEC 15. There is deliberately no release tool.
pub fn catalog() -> Vec<ToolDef> {
    let tool = |name, read_only, description: &str, input_schema| ToolDef {
        name,
        description: format!("{description} {IDS}"),
        input_schema,
        read_only,
    };
    vec![
        tool(
            "resource_list",
            true,
            "The machine's resources (GPU lanes) and the phase of each one's run, as \
             `homebased --json resource list` prints them. A lane in `attention` is held \
             until a person checks the machine and releases it: no tool releases it.",
            schema::<MachineArgs>(),
        ),
        tool(
            "jobs",
            true,
            "The queued and active jobs in serving order, each queued one with `waiting` (why \
             it waits), as `homebased --json resource jobs` prints them.",
            schema::<MachineArgs>(),
        ),
        tool(
            "job_submit",
            false,
            "Submit a job (`homebased --json resource job submit`). Make a job_id UUID first \
             and keep it: a retry after a lost reply or a retryable error must pass the same \
             job_id and spec, which answers the same job instead of making a second. A job \
             that was preempted is queued again and resumes by itself: never resubmit it. A \
             run still executing at its start plus the spec's `time_limit` is stopped and its \
             job fails (JOB_FAILED, detail.cause time_limit); the run is told the instant in \
             HOMEBASED_DEADLINE, to checkpoint first. The \
             job runs with this server's environment (the agent's) and its working \
             directory resolves a relative `cwd`. Its events go to the spec's `thread`: \
             follow them with events_wait.",
            submit_schema(),
        ),
        tool(
            "job_show",
            true,
            "A job with its slot, every run (task UUIDs, exits, cleanup), its events and, \
             while queued, `waiting`: why it has not started. Use it to learn why a job \
             waits, as `homebased --json resource job show` prints it.",
            schema::<ShowArgs>(),
        ),
        tool(
            "job_log",
            true,
            "Every run's output log of a job, oldest first, each with its task UUID, as \
             `homebased --json resource job log --tail N` prints them; answers at once (it \
             does not follow). Wait for the job's events with events_wait, then read this.",
            schema::<JobLogArgs>(),
        ),
        tool(
            "task_log",
            true,
            "One run's output log by its task UUID, as `homebased --json task log --tail N` \
             prints it.",
            schema::<TaskLogArgs>(),
        ),
        tool(
            "job_move",
            false,
            "Move a queued or active job within the queue (`homebased --json resource job \
             move`). Make a new operation_id UUID for each move and keep it: a retry after a \
             lost reply passes the same one and gets the stored result, not a second move.",
            schema::<MoveArgs>(),
        ),
        tool(
            "job_cancel",
            false,
            "Cancel a job: queued work is dropped, an active run is stopped and cleaned up \
             (`homebased --json resource job cancel`). Make a new operation_id UUID for each \
             cancel and keep it for a retry after a lost reply.",
            schema::<CancelArgs>(),
        ),
        tool(
            "events_wait",
            true,
            "The events of a thread (JOB_SUCCEEDED, JOB_FAILED, JOB_CANCELLED, \
             JOB_PREEMPTED, JOB_ATTENTION, notices) recorded after the cursor `after`, \
             waiting until there is one or `timeout` passes (at most 5m; an empty list then). \
             Pass the answer's `cursor` as `after` next time. Deduplicate on (job, seq). \
             JOB_PREEMPTED means the job resumes by itself: do not resubmit it. \
             JOB_ATTENTION means a person must check the machine.",
            schema::<EventsWaitArgs>(),
        ),
        tool(
            "schema",
            true,
            "The JSON Schema of the job spec that job_submit takes, as `homebased resource \
             schema` prints it.",
            schema::<NoArgs>(),
        ),
    ]
}

/// The input schema of `T` (draft 2020-12, as MCP asks), as the object MCP carries.
fn schema<T: JsonSchema>() -> Map<String, Value> {
    let root = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    match root.to_value() {
        Value::Object(mut map) => {
            map.remove("$schema");
            map.remove("title");
            // Some clients read `properties` of every tool, even one that takes nothing.
            map.entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            map
        }
        _ => Map::new(),
    }
}

/// `spec`'s schema: the one `resource schema` prints, whose `$defs` are lifted to the tool
/// schema's root by [`submit_schema`] (its references point there).
fn spec_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut spec = homebased_shared::spec::json_schema();
    if let Value::Object(map) = &mut spec {
        map.remove("$schema");
    }
    schemars::Schema::try_from(spec).unwrap_or_default()
}

/// [`SubmitArgs`]' schema with the spec's `$defs` at the root, where the spec's
/// `#/$defs/...` references resolve.
fn submit_schema() -> Map<String, Value> {
    let mut root = schema::<SubmitArgs>();
    let defs = root
        .get_mut("properties")
        .and_then(|p| p.get_mut("spec"))
        .and_then(Value::as_object_mut)
        .and_then(|spec| spec.remove("$defs"));
    if let Some(Value::Object(defs)) = defs {
        let root_defs = root
            .entry("$defs")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(root_defs) = root_defs {
            root_defs.extend(defs);
        }
    }
    root
}

/// A tool's arguments as its type: a missing, unknown or mistyped argument is `usage`,
/// naming the tool and what was wrong.
pub fn decode<T: DeserializeOwned>(
    tool: &str,
    arguments: Option<Map<String, Value>>,
) -> ApiResult<T> {
    let arguments = Value::Object(arguments.unwrap_or_default());
    serde_json::from_value(arguments.clone()).map_err(|e| {
        ApiError::usage(format!("{tool}: bad arguments: {e}"))
            .with_input(json!({ "arguments": arguments }))
    })
}

/// An id argument, read as the CLI reads its ids: a full UUID, else `invalid_queue_input`.
pub fn id<T: std::str::FromStr>(field: &str, text: &str) -> ApiResult<T> {
    text.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidQueueInput,
            format!("{field}: {text:?} is not a full UUID (ids are never shortened)"),
        )
        .with_input(json!({ field: text }))
    })
}

/// The spec of `job_submit`: an object, else `invalid_spec` at its root (nothing is sent).
pub fn spec_object(spec: Value) -> ApiResult<Value> {
    if spec.is_object() {
        return Ok(spec);
    }
    let kind = match &spec {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Err(ApiError::new(
        ErrorCode::InvalidSpec,
        format!("the spec must be a JSON object, not {kind}"),
    )
    .with_input(json!({ "pointer": "", "value": spec })))
}

/// `events_wait`'s `timeout`: a duration up to [`MAX_WAIT`], [`DEFAULT_WAIT`] when absent.
pub fn wait(timeout: Option<&str>) -> ApiResult<Duration> {
    let Some(text) = timeout else {
        return Ok(DEFAULT_WAIT);
    };
    let refuse = |why: String| {
        ApiError::usage(format!("timeout: {text:?} {why}")).with_input(json!({ "timeout": text }))
    };
    let wait =
        humantime::parse_duration(text).map_err(|e| refuse(format!("is no duration: {e}")))?;
    if wait > MAX_WAIT {
        return Err(refuse(
            "is longer than the 5m events_wait waits at most".into(),
        ));
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolDef {
        catalog().into_iter().find(|t| t.name == name).unwrap()
    }

    #[test]
    fn the_tools_are_those_of_the_spec_and_none_releases() {
        let names: Vec<&str> = catalog().iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "resource_list",
                "jobs",
                "job_submit",
                "job_show",
                "job_log",
                "task_log",
                "job_move",
                "job_cancel",
                "events_wait",
                "schema"
            ]
        );
        for t in catalog() {
            assert!(!t.name.contains("release"), "{}", t.name);
            assert!(t.description.contains("full UUIDs"), "{}", t.name);
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
        }
        let writes: Vec<&str> = catalog()
            .iter()
            .filter(|t| !t.read_only)
            .map(|t| t.name)
            .collect();
        assert_eq!(writes, ["job_submit", "job_move", "job_cancel"]);
        assert!(tool("job_submit").description.contains("never resubmit"));
        assert!(tool("job_move").description.contains("operation_id"));
        assert!(tool("job_show").description.contains("why"));
    }

    #[test]
    fn schemas_come_from_the_api_types() {
        // The spec is the schema `resource schema` prints, its $defs lifted to the root.
        let submit = tool("job_submit").input_schema;
        let mut printed = homebased_shared::spec::json_schema();
        let printed_defs = printed.as_object_mut().unwrap().remove("$defs").unwrap();
        printed.as_object_mut().unwrap().remove("$schema");
        assert_eq!(submit["properties"]["spec"], printed);
        for (name, def) in printed_defs.as_object().unwrap() {
            assert_eq!(&submit["$defs"][name], def, "{name}");
        }
        assert_eq!(submit["required"], json!(["spec"]));
        assert_eq!(submit["properties"]["job_id"]["format"], "uuid");
        // Move takes the API's placement, with its priorities.
        let moving = tool("job_move").input_schema;
        let mut required = moving["required"].as_array().unwrap().clone();
        required.sort_by_key(|v| v.to_string());
        assert_eq!(
            required,
            json!(["job", "operation_id", "placement"])
                .as_array()
                .unwrap()
                .clone()
        );
        let text = Value::Object(moving).to_string();
        for field in ["front", "back", "priority", "before", "after", "medium"] {
            assert!(text.contains(field), "{field}: {text}");
        }
        let wait = tool("events_wait").input_schema;
        assert_eq!(wait["required"], json!(["thread"]));
        assert_eq!(tool("schema").input_schema["properties"], json!({}));
    }

    #[test]
    fn arguments_are_refused_as_the_cli_refuses_its_flags() {
        let args = |v: Value| v.as_object().cloned();
        let e = decode::<ShowArgs>("job_show", args(json!({"job": 42}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Usage);
        assert!(
            e.message.starts_with("job_show: bad arguments"),
            "{}",
            e.message
        );
        assert_eq!(e.input["arguments"]["job"], 42);
        let e = decode::<ShowArgs>("job_show", args(json!({"job": "x", "jobs": 1}))).unwrap_err();
        assert!(e.message.contains("unknown field"), "{}", e.message);
        assert_eq!(
            decode::<ShowArgs>("job_show", None).unwrap_err().code,
            ErrorCode::Usage
        );
        let ok: ShowArgs = decode("job_show", args(json!({"job": "abc"}))).unwrap();
        let e = id::<JobId>("job", &ok.job).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidQueueInput);
        assert_eq!(e.input, json!({"job": "abc"}));
        let e = spec_object(json!("{\"api_version\": 1}")).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSpec);
        assert_eq!(e.input["pointer"], "");
        assert!(e.message.contains("not a string"), "{}", e.message);
        assert!(spec_object(json!({})).is_ok());
    }

    #[test]
    fn a_wait_is_at_most_five_minutes() {
        assert_eq!(wait(None).unwrap(), DEFAULT_WAIT);
        assert_eq!(wait(Some("5m")).unwrap(), MAX_WAIT);
        assert_eq!(wait(Some("2s")).unwrap(), Duration::from_secs(2));
        assert_eq!(wait(Some("6m")).unwrap_err().code, ErrorCode::Usage);
        assert_eq!(wait(Some("later")).unwrap_err().input["timeout"], "later");
    }
}
