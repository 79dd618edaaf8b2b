//! `homebased mcp`: the Model Context Protocol on stdio for a coding agent (SPEC 15). Its
//! client starts it (`{"command":"homebased","args":["mcp"]}`); it talks to this home's
//! daemon through the socket with the one typed client, as the CLI does, and answers each
//! tool with exactly the JSON object the matching `--json` command prints (as structured
//! content and as text), each refusal as a tool error carrying the error envelope.
//!
//! - [`tools`]: the catalog (names, descriptions, input schemas from the API's types) and
//!   the pure decoding of arguments.
//! - here: the server over `rmcp`, and each tool's call.
//!
//! Nothing here writes to stdout but the transport: stdout is the protocol.

pub mod tools;

use crate::cli::job_log;
use crate::client::Client;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, OperationId, TaskId, ThreadId};
use homebased_shared::wire::{CancelRequest, MoveRequest, SubmitRequest, Versioned};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value};
use std::sync::Arc;
use tools::{decode, id};

/// What the agent reads once, at `initialize`.
const INSTRUCTIONS: &str = "homebased is this machine's GPU job queue. Submit work with \
    job_submit (make the job_id UUID yourself and reuse it on a retry), then wait for the \
    job's events with events_wait on the spec's thread and read its output with job_log. Ids \
    are full UUIDs. Move and cancel take a new operation_id UUID each, reused only to retry \
    that same action after a lost reply. A preempted job resumes by itself: never resubmit \
    it. job_show says why a job waits. A lane in Attention is released by a person after a \
    machine check, never by a tool.";

/// Serves MCP on stdin and stdout until the client closes them.
pub fn serve(home: Home) -> ApiResult<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ApiError::internal)?;
    let server = Server {
        client: Client::socket(home.socket()),
        home,
        tools: Arc::new(tools::catalog().into_iter().map(tool).collect()),
    };
    let served = runtime.block_on(async {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ApiError::usage(format!("the MCP client did not initialize: {e}")))?;
        running
            .waiting()
            .await
            .map_err(|e| ApiError::internal(format!("the MCP session ended abnormally: {e}")))?;
        Ok(())
    });
    // A read of stdin may still be pending on the blocking pool (a client that closed stdout
    // but not stdin): it is not waited for.
    runtime.shutdown_background();
    served
}

/// The MCP form of a catalog entry.
fn tool(def: tools::ToolDef) -> Tool {
    // Move and cancel are safe to repeat (their operation id is required); a submit only with
    // its optional `job_id`, so it is not announced as idempotent.
    let annotations = ToolAnnotations::new()
        .read_only(def.read_only)
        .destructive(def.name == "job_cancel")
        .idempotent(def.name != "job_submit");
    Tool::new(def.name, def.description, def.input_schema).with_annotations(annotations)
}

#[derive(Clone)]
struct Server {
    client: Client,
    home: Home,
    tools: Arc<Vec<Tool>>,
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("homebased", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if !self.tools.iter().any(|t| t.name == name) {
            // A name the agent made up is the request's fault, not the tool's (MCP: -32602).
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
            return Err(McpError::invalid_params(
                format!("no tool named {name:?}; the tools are {}", known.join(", ")),
                None,
            ));
        }
        let answer = self.call(name, request.arguments).await;
        Ok(result(answer).into())
    }
}

/// A tool's answer: the object its `--json` command prints, or the error envelope its
/// refusal prints on stderr, as structured content and as the same JSON in text.
fn result(answer: ApiResult<Value>) -> CallToolResult {
    match answer {
        Ok(value) => CallToolResult::structured(value),
        Err(e) => CallToolResult::structured_error(e.envelope()),
    }
}

/// An answer in the versioned envelope, as the CLI's `--json` prints it.
fn versioned<T: serde::Serialize>(answer: &T) -> ApiResult<Value> {
    serde_json::to_value(Versioned::new(answer)).map_err(ApiError::internal)
}

/// A listing as the daemon sent it (what `--json` prints byte for byte), as an object.
fn listing(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::internal(format!("unexpected answer from the daemon: {e}")))
}

impl Server {
    async fn call(&self, name: &str, arguments: Option<Map<String, Value>>) -> ApiResult<Value> {
        let client = &self.client;
        match name {
            "resource_list" => {
                let args: tools::MachineArgs = decode(name, arguments)?;
                listing(client.resource_list(args.machine.as_deref()).await?.bytes())
            }
            "jobs" => {
                let args: tools::MachineArgs = decode(name, arguments)?;
                listing(client.job_list(args.machine.as_deref()).await?.bytes())
            }
            "job_submit" => {
                let args: tools::SubmitArgs = decode(name, arguments)?;
                let spec = tools::spec_object(args.spec)?;
                let job: JobId = match &args.job_id {
                    Some(text) => id("job_id", text)?,
                    None => JobId::new(),
                };
                let request = SubmitRequest {
                    job,
                    spec,
                    // The agent's environment, captured now as the CLI captures its own.
                    submitter: crate::cli::submitter()?,
                    allow_other_thread: false,
                    machine: None,
                };
                let submitted = client
                    .submit(&request)
                    .await
                    .map_err(|e| crate::cli::name_the_job(e, job, "job_id"))?;
                versioned(&submitted)
            }
            "job_show" => {
                let args: tools::ShowArgs = decode(name, arguments)?;
                let job: JobId = id("job", &args.job)?;
                versioned(&client.job_show(job, args.machine.as_deref()).await?)
            }
            "job_log" => {
                let args: tools::JobLogArgs = decode(name, arguments)?;
                id::<JobId>("job", &args.job)?;
                let asked = job_log::Asked {
                    tail: args.tail,
                    follow: false,
                    raw: false,
                    machine: None,
                };
                let printed = job_log::run(client, &self.home, &args.job, asked).await?;
                printed
                    .map(|p| p.json)
                    .ok_or_else(|| ApiError::internal("job log answered nothing"))
            }
            "task_log" => {
                let args: tools::TaskLogArgs = decode(name, arguments)?;
                id::<TaskId>("task", &args.task)?;
                let printed = match &args.machine {
                    // Read from the run directory, as `task log` does: it works with the
                    // daemon down.
                    None => crate::cli::files::task_log(
                        &self.home, &args.task, args.tail, false, false,
                    )?
                    .ok_or_else(|| ApiError::internal("task log answered nothing"))?,
                    Some(machine) => {
                        crate::cli::fleet::task_log(client, &args.task, args.tail, false, machine)
                            .await?
                    }
                };
                Ok(printed.json)
            }
            "job_move" => {
                let args: tools::MoveArgs = decode(name, arguments)?;
                let job: JobId = id("job", &args.job)?;
                let request = MoveRequest {
                    operation_id: id::<OperationId>("operation_id", &args.operation_id)?,
                    placement: args.placement,
                };
                versioned(&client.job_move(job, None, &request).await?)
            }
            "job_cancel" => {
                let args: tools::CancelArgs = decode(name, arguments)?;
                let job: JobId = id("job", &args.job)?;
                let request = CancelRequest {
                    operation_id: id::<OperationId>("operation_id", &args.operation_id)?,
                };
                versioned(&client.job_cancel(job, None, &request).await?)
            }
            "events_wait" => {
                let args: tools::EventsWaitArgs = decode(name, arguments)?;
                let thread: ThreadId = id("thread", &args.thread)?;
                let wait = tools::wait(args.timeout.as_deref())?;
                versioned(
                    &client
                        .thread_events(thread, args.after.as_deref(), wait)
                        .await?,
                )
            }
            "schema" => {
                let _: tools::NoArgs = decode(name, arguments)?;
                Ok(homebased_shared::spec::json_schema())
            }
            other => Err(ApiError::internal(format!("no call for the tool {other}"))),
        }
    }
}
