//! Who may do what (docs/users.md, "Who may do what on the socket"): the
//! role's rule for each request, checked before the request is answered,
//! and the one ownership rule — a DAG, DAG run or run is user U's iff its
//! DAG's name is in U's namespace (`@U/…`).

use ax_protocol::api::{Role, StatusView};
use ax_protocol::{Request, RpcError, codes};
use ax_shared::users::user_dag_owner;

use super::Scheduler;
use super::handlers::store_err;
use crate::bus::Peer;
use ax_engine::{DagRunId, RunId};

/// How a role is named in messages.
pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::Owner => "owner",
        Role::Admin => "admin",
        Role::Viewer => "viewer",
        Role::User => "user",
        Role::Job => "job",
    }
}

/// The `forbidden` answer to `method`, naming the roles it needs and the
/// one the peer has.
pub(crate) fn forbidden(method: &str, needs: &str, peer: &Peer) -> RpcError {
    RpcError::new(
        codes::FORBIDDEN,
        format!(
            "{method}: needs {needs}; {} has the {} role",
            peer.user,
            role_name(peer.role)
        ),
    )
}

/// Whether `dag` is one of `user`'s DAGs.
pub(crate) fn owns(user: &str, dag: &str) -> bool {
    user_dag_owner(dag) == Some(user)
}

/// What a peer with the user role may ask of objects: a DAG, run or DAG
/// run not theirs is answered as one that does not exist, so that the ids
/// and names of others' are not confirmed.
fn hidden(what: String) -> RpcError {
    RpcError::new(codes::NOT_FOUND, format!("{what} not found"))
}

/// A status as `role` may see it: the user role gets the pools' slots
/// and axd's own facts, not the counts of everyone's runs, the job-file
/// errors of the jobs folder or the store's sizes (docs/users.md).
pub(crate) fn for_role(mut status: StatusView, role: Role) -> StatusView {
    if matches!(role, Role::User | Role::Job) {
        status.runs.clear();
        status.failed_last_hour = 0;
        status.errors.clear();
        status.store_bytes = None;
        status.log_bytes = None;
        status.config = None;
        status.cluster = None;
    }
    status
}

const ADMIN: &str = "the admin or owner role";

impl Scheduler {
    /// Refuses what `peer`'s role does not allow; for the user role, also
    /// what names an object of someone else. Reads the user role may make
    /// are narrowed to their own where they are answered (`list_runs`,
    /// `list_dags`, `events`, `status`).
    pub(super) fn authorize(&mut self, peer: &Peer, request: &Request) -> Result<(), RpcError> {
        let method = request.method();
        match peer.role {
            Role::Owner | Role::Admin => Ok(()),
            Role::Viewer if request.is_write() => Err(forbidden(
                method,
                &format!("{ADMIN} (members of socket_group may only read)"),
                peer,
            )),
            Role::Viewer => Ok(()),
            Role::Job => match request {
                Request::Heartbeat(h) if Some(h.run) == peer.run => Ok(()),
                _ => Err(forbidden(
                    method,
                    &format!(
                        "a role beyond job (a job's connection may only heartbeat its own run, {})",
                        peer.run.map(|r| r.to_string()).unwrap_or_default()
                    ),
                    peer,
                )),
            },
            Role::User => self.authorize_user(peer, request),
        }
    }

    fn authorize_user(&mut self, peer: &Peer, request: &Request) -> Result<(), RpcError> {
        let user = &*peer.user;
        match request {
            Request::Status(_)
            | Request::ListRuns(_)
            | Request::ListDags(_)
            | Request::Events(_)
            | Request::Subscribe(_)
            | Request::Submit(_) => Ok(()),
            // Users' own DAGs: each handler acts on the caller's own only
            // (`user_dags`), and refuses `--user` for anyone else.
            Request::ApplyDags(_) | Request::ExportDag(_) | Request::RemoveDag(_) => Ok(()),
            Request::GetRun(p) => self.user_run(user, p.id),
            Request::LogInfo(p) => self.user_run(user, p.run),
            Request::Logs(p) => self.user_run(user, p.run),
            Request::Heartbeat(p) => self.user_run(user, p.run),
            Request::Retry(p) => self.user_run(user, p.id),
            Request::Cancel(p) => {
                for id in p.id.iter().chain(p.ids.iter().flatten()) {
                    self.user_run(user, *id)?;
                }
                Ok(())
            }
            Request::GetDagRun(p) => self.user_dag_run(user, p.id),
            Request::CancelDagRun(p) => self.user_dag_run(user, p.id),
            Request::GetDag(p) => user_dag(user, &p.name),
            Request::Trigger(p) => user_dag(user, &p.dag),
            Request::Pause(p) => self.user_pause(peer, request, &p.0),
            Request::Resume(p) => self.user_pause(peer, request, &p.0),
            _ => Err(forbidden(request.method(), ADMIN, peer)),
        }
    }

    /// `pause`/`resume` of one of the user's DAGs; of every DAG, refused.
    fn user_pause(
        &self,
        peer: &Peer,
        request: &Request,
        target: &ax_protocol::request::DagTarget,
    ) -> Result<(), RpcError> {
        match target {
            t if t.all => Err(forbidden(
                &format!("{} --all", request.method()),
                ADMIN,
                peer,
            )),
            t => match &t.dag {
                Some(dag) => user_dag(&peer.user, dag),
                None => Ok(()),
            },
        }
    }

    /// Run `id` is `user`'s (held by the engine, or stored).
    fn user_run(&mut self, user: &str, id: u64) -> Result<(), RpcError> {
        let dag = match self.engine.run(RunId(id)) {
            Some(r) => Some(r.dag.to_string()),
            None => self.store.get_run(id).map_err(store_err)?.map(|v| v.dag),
        };
        match dag {
            Some(d) if owns(user, &d) => Ok(()),
            _ => Err(hidden(format!("run {id}"))),
        }
    }

    /// DAG run `id` is `user`'s.
    fn user_dag_run(&mut self, user: &str, id: u64) -> Result<(), RpcError> {
        let dag = match self.engine.dag_run(DagRunId(id)) {
            Some(dr) => Some(dr.dag.to_string()),
            None => self
                .store
                .dag_run_spec(id)
                .map_err(store_err)?
                .map(|s| s.name.clone()),
        };
        match dag {
            Some(d) if owns(user, &d) => Ok(()),
            _ => Err(hidden(format!("DAG run {id}"))),
        }
    }

    /// The DAG name of each of `dag_runs` and of each of `runs` (`None`:
    /// not known), for filtering a user's notifications.
    pub(super) fn dag_names(&mut self, runs: &[u64], dag_runs: &[u64]) -> crate::bus::DagNames {
        let runs = runs
            .iter()
            .map(|&id| {
                let dag = match self.engine.run(RunId(id)) {
                    Some(r) => Some(r.dag.to_string()),
                    None => self.store.get_run(id).ok().flatten().map(|v| v.dag),
                };
                (id, dag)
            })
            .collect();
        let dag_runs = dag_runs
            .iter()
            .map(|&id| {
                let dag = match self.engine.dag_run(DagRunId(id)) {
                    Some(dr) => Some(dr.dag.to_string()),
                    None => self
                        .store
                        .dag_run_spec(id)
                        .ok()
                        .flatten()
                        .map(|s| s.name.clone()),
                };
                (id, dag)
            })
            .collect();
        crate::bus::DagNames { runs, dag_runs }
    }

    /// The run an attempt whose process group is `pgid` belongs to, while
    /// that attempt runs (its leader's pid is the group's id: each
    /// attempt is its own session).
    pub(super) fn attempt_of(&self, pgid: u32) -> Option<u64> {
        self.engine.runs().find_map(|r| {
            let a = r.attempts.last()?;
            (a.finished_at.is_none() && a.pid == Some(pgid)).then_some(r.id.0)
        })
    }
}

fn user_dag(user: &str, dag: &str) -> Result<(), RpcError> {
    if owns(user, dag) {
        Ok(())
    } else {
        Err(hidden(format!("DAG {dag:?}")))
    }
}
