//! How a user's own DAGs are named (docs/users.md, "User DAGs"): every
//! name of a user DAG starts with `@` and the user's name, which no
//! system DAG name may (a file or folder of the jobs folder whose name
//! starts with `@` is refused), so the two can never collide.

use crate::jobfile::valid_account_name;

/// The name `user`'s DAG `name` is known by: `@alice/standup`.
pub fn user_dag_name(user: &str, name: &str) -> String {
    format!("@{user}/{name}")
}

/// The user whose DAG `dag` is, for a user DAG's name; `None` for a system
/// DAG's (or an ad-hoc run's).
pub fn user_dag_owner(dag: &str) -> Option<&str> {
    let rest = dag.strip_prefix('@')?;
    let (user, name) = rest.split_once('/')?;
    (valid_account_name(user) && !name.is_empty()).then_some(user)
}

/// Whether `dag` names a DAG only a user's own requests may create: any
/// name starting with `@` (system DAGs and ad-hoc names may not).
pub fn is_user_namespace(dag: &str) -> bool {
    dag.starts_with('@')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_is_read_back_from_the_name() {
        assert_eq!(
            user_dag_owner(&user_dag_name("alice", "standup")),
            Some("alice")
        );
        assert_eq!(user_dag_owner("@alice/team/standup"), Some("alice"));
        assert_eq!(user_dag_owner("alice/standup"), None);
        assert_eq!(user_dag_owner("@alice"), None);
        assert_eq!(user_dag_owner("@alice/"), None);
        assert_eq!(user_dag_owner("@Bad!/x"), None);
    }
}
