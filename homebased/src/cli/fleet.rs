//! `homebased fleet machines|probe|add|remove`: the Fleet directory of this machine's
//! daemon (SPEC section 13), through its socket.

use super::render::table;
use super::Printed;
use crate::client::Client;
use clap::Subcommand;
use homebased_shared::error::ApiResult;
use homebased_shared::time::rfc3339;
use homebased_shared::wire::{AddPeerRequest, Identity, MachineView, PeerRequest};

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// This machine and its peers, with their state.
    Machines,
    /// Probe a peer now; answers its identity, or machine_unavailable.
    Probe {
        /// A peer's URL, name or UUID.
        #[arg(value_name = "URL|NAME|UUID")]
        peer: String,
    },
    /// Add a peer at http://host[:port] (probed at once; an unreachable one is added as down).
    Add {
        #[arg(value_name = "URL")]
        address: String,
    },
    /// Remove a peer added with `fleet add` (config peers are removed in the config).
    Remove {
        #[arg(value_name = "URL|NAME|UUID")]
        peer: String,
    },
}

pub async fn run(cmd: FleetCommand, client: &Client) -> ApiResult<Printed> {
    match cmd {
        FleetCommand::Machines => {
            let list = client.fleet_machines().await?;
            let ids = list
                .machines
                .iter()
                .filter_map(|m| m.machine.map(|id| id.to_string()))
                .collect();
            let human = machines(&list.machines);
            Printed::answer(&list, ids, human)
        }
        FleetCommand::Probe { peer } => {
            let identity = client.fleet_probe(&PeerRequest { peer }).await?;
            let human = identity_line(&identity);
            Printed::answer(&identity, vec![identity.machine.to_string()], human)
        }
        FleetCommand::Add { address } => {
            let view = client.fleet_add(&AddPeerRequest { address }).await?;
            let human = format!(
                "added {} ({})",
                view.address.as_deref().unwrap_or("-"),
                state(&view)
            );
            let ids = view.machine.map(|m| m.to_string()).into_iter().collect();
            Printed::answer(&view, ids, human)
        }
        FleetCommand::Remove { peer } => {
            let removed = client.fleet_remove(&PeerRequest { peer }).await?;
            let human = format!(
                "removed {}",
                removed.removed.address.as_deref().unwrap_or("-")
            );
            let ids = removed
                .removed
                .machine
                .map(|m| m.to_string())
                .into_iter()
                .collect();
            Printed::answer(&removed, ids, human)
        }
    }
}

/// `task log T --machine M`: the run's log from the machine whose daemon holds its run
/// directory, through this machine's daemon.
pub async fn task_log(
    client: &Client,
    task: &str,
    tail: Option<usize>,
    raw: bool,
    machine: &str,
) -> ApiResult<Printed> {
    let id: homebased_shared::ids::TaskId = task.parse().map_err(|_| {
        homebased_shared::error::ApiError::new(
            homebased_shared::error::ErrorCode::InvalidQueueInput,
            format!("{task:?} is not a full task UUID"),
        )
        .with_input(serde_json::json!({ "task": task }))
    })?;
    let log = client.task_log(id, tail, raw, Some(machine)).await?;
    let human = log
        .answer
        .log
        .strip_suffix('\n')
        .unwrap_or(&log.answer.log)
        .to_string();
    Printed::answer(&log, vec![], human)
}

fn state(view: &MachineView) -> &'static str {
    use homebased_shared::wire::PeerState;
    match view.state {
        PeerState::Up => "up",
        PeerState::Down => "down",
        PeerState::Incompatible => "incompatible",
        PeerState::IdentityMismatch => "identity_mismatch",
        PeerState::Refused => "refused",
    }
}

fn identity_line(id: &Identity) -> String {
    format!(
        "{} {} version {} protocol {}-{} boot {}",
        id.machine, id.name, id.version, id.protocol.min, id.protocol.max, id.boot
    )
}

/// `MACHINE NAME ADDRESS SOURCE STATE LAST SEEN`.
pub fn machines(list: &[MachineView]) -> String {
    use homebased_shared::wire::PeerSource;
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|m| {
            vec![
                m.machine.map_or_else(|| "-".into(), |id| id.to_string()),
                m.name.clone().unwrap_or_else(|| "-".into()),
                m.address.clone().unwrap_or_else(|| "-".into()),
                match m.source {
                    PeerSource::Local => "self",
                    PeerSource::Config => "config",
                    PeerSource::Added => "added",
                }
                .into(),
                state(m).into(),
                m.last_seen.map_or_else(|| "-".into(), rfc3339),
            ]
        })
        .collect();
    table(
        &["MACHINE", "NAME", "ADDRESS", "SOURCE", "STATE", "LAST SEEN"],
        &rows,
    )
}
