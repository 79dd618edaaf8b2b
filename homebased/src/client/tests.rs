//! The client against the real router and a real core, served in-process: on TCP behind the
//! listener's guard (with the bearer token recorded on the way in) and on a Unix socket.

use super::*;
use crate::api::{self, Listener};
use crate::core::CoreStop;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use homebased_shared::config::Config;
use homebased_shared::error::ErrorCode;
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, MachineId, OperationId};
use std::sync::{Arc, Mutex};

/// A daemon's core and router without the daemon: stopped when dropped.
struct Served {
    _dir: tempfile::TempDir,
    home: Home,
    machine: MachineId,
    stop: CoreStop,
    /// Every `Authorization` header the TCP listener received, `None` where none was sent.
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.raise();
    }
}

async fn record(
    State(seen): State<Arc<Mutex<Vec<Option<String>>>>>,
    request: Request,
    next: Next,
) -> Response {
    let auth = request
        .headers()
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string());
    seen.lock().unwrap().push(auth);
    next.run(request).await
}

/// Starts a core on a fresh home and serves `listener`'s router: on `127.0.0.1:<free>` for
/// TCP (answered with its address), on the home's socket otherwise.
async fn serve(listener: Listener) -> (Served, Client) {
    let dir = tempfile::tempdir().unwrap();
    let core = crate::core::testing::open_core(&dir, Config::default(), Default::default());
    let home = core.home().clone();
    let crate::core::CoreThread { handle, stop, .. } = core.spawn().unwrap();
    let machine = handle.machine().await.unwrap();
    let (shutdown, _) = tokio::sync::mpsc::unbounded_channel();
    let fleet = crate::fleet::Fleet::load(handle.clone(), &Default::default(), None)
        .await
        .unwrap();
    let router = api::router(listener, handle, shutdown, fleet);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = match listener {
        Listener::Tcp => {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = tcp.local_addr().unwrap();
            let router = router
                .layer(axum::middleware::from_fn_with_state(
                    Arc::new(api::guard::HostPolicy::new(addr, None, None)),
                    api::guard::guard,
                ))
                .layer(axum::middleware::from_fn_with_state(seen.clone(), record));
            tokio::spawn(async move { axum::serve(tcp, router).await });
            Client::tcp(&format!("http://{addr}"))
        }
        Listener::Socket => {
            let socket = api::unix::bind(&home.socket()).unwrap();
            tokio::spawn(api::unix::serve(socket, router, std::future::pending()));
            Client::socket(home.socket())
        }
    };
    let served = Served {
        _dir: dir,
        home,
        machine,
        stop,
        seen,
    };
    (served, client)
}

#[tokio::test]
async fn tcp_requests_carry_the_bearer_token_and_answer_typed() {
    let (served, client) = serve(Listener::Tcp).await;
    let client = client.with_token("s3cret-token");

    let status = client.status().await.unwrap();
    assert_eq!(status.socket, "up");
    assert_eq!(status.machine, Some(served.machine));

    let machine = served.machine.to_string();
    let list = client.resource_list(Some(&machine)).await.unwrap();
    assert!(list.bytes().starts_with(br#"{"api_version":1,"machine":"#));
    assert_eq!(list.decode().unwrap().machine, served.machine);

    // A write through the guard: same-origin JSON, answered with the daemon's own error.
    let req = CancelRequest {
        operation_id: OperationId::new(),
    };
    let err = client
        .job_cancel(JobId::new(), None, &req)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::JobNotFound, "{err:?}");

    let seen = served.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen
        .iter()
        .all(|auth| auth.as_deref() == Some("Bearer s3cret-token")));
}

#[tokio::test]
async fn tcp_without_a_token_sends_no_authorization() {
    let (served, client) = serve(Listener::Tcp).await;
    client.job_list(None).await.unwrap().decode().unwrap();
    assert_eq!(*served.seen.lock().unwrap(), vec![None]);
}

#[tokio::test]
async fn tcp_refuses_register_with_the_daemons_error() {
    let (_served, client) = serve(Listener::Tcp).await;
    let req = RegisterRequest {
        name: "lane".into(),
        device: None,
    };
    let err = client.register(&req).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Permission, "{err:?}");
}

/// A request the typed methods do not make: a `?machine=` on status or register.
async fn raw(client: &Client, method: Method, path: &str) -> ApiResult<Bytes> {
    let body = (method == Method::POST).then(|| Bytes::from(r#"{"name":"lane0"}"#));
    client.send(method, path, body, Retry::Once).await
}

#[tokio::test]
async fn status_and_register_check_the_machine() {
    let (served, client) = serve(Listener::Socket).await;
    for query in [
        "?machine=elsewhere".to_string(),
        format!("?machine={}", MachineId::new()),
    ] {
        let err = raw(&client, Method::GET, &format!("/v1/status{query}"))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::MachineNotFound, "{query}: {err:?}");
        let err = raw(&client, Method::POST, &format!("/v1/resources{query}"))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::MachineNotFound, "{query}: {err:?}");
    }
    let list = client.resource_list(None).await.unwrap().decode().unwrap();
    assert!(list.resources.is_empty(), "{list:?}");

    let query = format!("?machine={}", served.machine);
    let status = raw(&client, Method::GET, &format!("/v1/status{query}")).await;
    let status: DaemonStatus = decode(&status.unwrap()).unwrap();
    assert_eq!(status.machine, Some(served.machine));
    let view = raw(&client, Method::POST, &format!("/v1/resources{query}")).await;
    let view: ResourceView = decode(&view.unwrap()).unwrap();
    assert_eq!(view.name, "lane0");
}

#[tokio::test]
async fn socket_answers_are_typed_and_versioned() {
    let (served, client) = serve(Listener::Socket).await;
    let view = client
        .register(&RegisterRequest {
            name: "lane0".into(),
            device: Some(3),
        })
        .await
        .unwrap();
    let list = client.resource_list(None).await.unwrap().decode().unwrap();
    assert_eq!(list.resources, vec![view]);
    assert_eq!(
        client.status().await.unwrap().home,
        served.home.root().display().to_string()
    );
}

#[tokio::test]
async fn a_missing_socket_is_daemon_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::socket(dir.path().join("homebased.sock"));
    let err = client.status().await.unwrap_err();
    assert_eq!(err.code, ErrorCode::DaemonUnavailable);
    assert!(err.retryable);
}

#[tokio::test]
async fn an_unreachable_peer_is_machine_unavailable() {
    // Bound and dropped: nothing listens on that port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Client::tcp(&format!("127.0.0.1:{port}"))
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::MachineUnavailable, "{err:?}");
    assert!(err.retryable);
}

#[test]
fn tcp_addresses_default_to_port_7677() {
    let host = |a: &str| match Endpoint::tcp(a) {
        Endpoint::Tcp(authority) => authority,
        Endpoint::Socket(_) => unreachable!(),
    };
    assert_eq!(host("http://trainer"), "trainer:7677");
    assert_eq!(host("http://trainer:8000/"), "trainer:8000");
    assert_eq!(host("10.0.0.2:7000"), "10.0.0.2:7000");
    assert_eq!(host("http://[::1]"), "[::1]:7677");
    assert_eq!(host("[::1]:9"), "[::1]:9");
}

#[test]
fn queries_carry_only_what_is_set_and_encoded() {
    assert_eq!(path("/v1/jobs", &[("machine", None)]), "/v1/jobs");
    assert_eq!(
        path(
            "/v1/tasks/t/log",
            &[("tail", Some("5")), ("machine", Some("gpu box"))]
        ),
        "/v1/tasks/t/log?tail=5&machine=gpu%20box"
    );
}

#[tokio::test]
async fn the_stored_environment_is_served_on_the_socket_and_never_on_tcp() {
    let (_served, socket) = serve(Listener::Socket).await;
    let err = socket.job_environment(JobId::new()).await.unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::JobNotFound,
        "the route exists: {err:?}"
    );
    let (_served, tcp) = serve(Listener::Tcp).await;
    let err = tcp.job_environment(JobId::new()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Usage, "no such route on TCP: {err:?}");
}

#[tokio::test]
async fn a_streamed_listing_is_the_daemons_whole_answer() {
    let (_served, client) = serve(Listener::Socket).await;
    let thread = homebased_shared::ids::ThreadId::new();
    let mut submitted = Vec::new();
    for priority in ["low", "high", "medium"] {
        let job = JobId::new();
        client
            .submit(&SubmitRequest {
                job,
                spec: serde_json::json!({
                    "api_version": 1,
                    "thread": thread,
                    "name": format!("{priority} job"),
                    "cwd": "/",
                    "priority": priority,
                    "preempt": {"mode": "wait"},
                    "workload": {"type": "task", "command": ["/bin/true"]},
                }),
                submitter: crate::core::testing::plain_submitter(),
                allow_other_thread: false,
                machine: None,
            })
            .await
            .unwrap();
        submitted.push(job);
    }
    let whole = client.job_list(None).await.unwrap().into_bytes();
    let mut streamed = Vec::new();
    client
        .job_list_streamed(None, &mut |bytes| {
            streamed.extend_from_slice(bytes);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(streamed, whole.to_vec());
    // Serving order: high, medium, low; each the first of its level, with why it waits.
    let list: JobList = decode(&streamed).unwrap();
    let listed: Vec<(JobId, Option<u32>)> = list.jobs.iter().map(|j| (j.id, j.position)).collect();
    assert_eq!(
        listed,
        [
            (submitted[1], Some(1)),
            (submitted[2], Some(1)),
            (submitted[0], Some(1))
        ]
    );
    assert!(list.jobs.iter().all(|j| j.waiting.is_some()), "{list:?}");
}

#[tokio::test]
async fn a_streamed_answer_cut_part_way_is_an_error_after_what_arrived() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("homebased.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = conn.read(&mut head).await.unwrap();
        // One chunk of a chunked answer, then the connection closes without the last chunk.
        conn.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
              10\r\n{\"api_version\":1\r\n",
        )
        .await
        .unwrap();
    });
    let client = Client::socket(socket);
    let mut arrived = Vec::new();
    let err = client
        .job_list_streamed(None, &mut |bytes| {
            arrived.extend_from_slice(bytes);
            Ok(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::DaemonUnavailable, "{err:?}");
    assert_eq!(arrived, b"{\"api_version\":1");
}
