//! Engine and authentication errors as gRPC statuses, each with a message fit to show
//! the client: `InvalidArgument` for SQL the engine refuses or cannot plan,
//! `DeadlineExceeded` for the query timeout, `ResourceExhausted` for the memory limits
//! and for a full admission queue, `Unauthenticated` and `PermissionDenied` for tokens.

use tonic::Status;

use crate::auth::AuthError;

/// The status a client sees for a failed query; counted by kind.
pub fn query_status(e: &quiver_query::Error) -> Status {
    use quiver_query::Error as E;
    let (kind, status) = match e {
        E::Refused(_) | E::Sql(_) => ("sql", Status::invalid_argument(e.to_string())),
        E::Timeout { .. } => ("timeout", Status::deadline_exceeded(e.to_string())),
        E::ResourcesExhausted(_) => ("memory", Status::resource_exhausted(e.to_string())),
        E::Busy { .. } => ("busy", Status::resource_exhausted(e.to_string())),
        E::StoreUnavailable(_) => ("store", Status::unavailable(e.to_string())),
        E::Unavailable(_) => ("unavailable", Status::unavailable(e.to_string())),
        E::Internal(_) => ("internal", Status::internal(e.to_string())),
    };
    metrics::counter!("quiver_flight_errors_total", "kind" => kind).increment(1);
    status
}

/// The status for a refused token; `database` when the token may not read it.
pub fn auth_status(e: AuthError, database: Option<&str>) -> Status {
    match (e, database) {
        (AuthError::Unauthenticated, _) => Status::unauthenticated(
            "a Quiver token with read permission is required: send the gRPC header \
             `authorization: Bearer <token>`",
        ),
        (AuthError::Forbidden, Some(database)) => {
            Status::permission_denied(format!("the token may not read database {database:?}"))
        }
        (AuthError::Forbidden, None) => {
            Status::permission_denied("the token has no read permission")
        }
    }
}

/// A status for a failure of the door itself (encoding a schema, a poisoned lock).
pub fn internal(what: &str, e: impl std::fmt::Display) -> Status {
    metrics::counter!("quiver_flight_errors_total", "kind" => "internal").increment(1);
    tracing::warn!(error = %e, "flight: {what}");
    Status::internal(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn engine_errors_map_to_the_grpc_codes_clients_act_on() {
        let sql = query_status(&quiver_query::Error::Sql("no such table".into()));
        assert_eq!(sql.code(), Code::InvalidArgument);
        assert_eq!(sql.message(), "no such table");
        let busy = quiver_query::Error::Busy {
            running: 1,
            queued: 1,
        };
        assert_eq!(query_status(&busy).code(), Code::ResourceExhausted);
        let timeout = quiver_query::Error::Timeout { ms: 5 };
        assert_eq!(query_status(&timeout).code(), Code::DeadlineExceeded);
        assert_eq!(
            auth_status(AuthError::Unauthenticated, None).code(),
            Code::Unauthenticated
        );
    }
}
