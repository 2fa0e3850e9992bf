//! The Flight SQL door (`flight.addr`) through arrow-flight's own client: a statement's
//! batches equal what `POST /api/v1/query/arrow` answers, InfluxDB 3's JSON ticket
//! answers the same, and errors arrive as the gRPC codes clients act on (bad SQL:
//! `InvalidArgument`; no token: `Unauthenticated`). Real drivers (ADBC, influxdb3-python)
//! are exercised by `tests/compat/test_flight.py`.

use std::time::Duration;

use arrow::ipc::reader::StreamReader;
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::{FlightDescriptor, FlightInfo, Ticket};
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::common::{free_port, Node, NodeSpec, TOKEN};

/// Longest any one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

async fn client(port: u16) -> FlightServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("an endpoint")
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT)
        .connect()
        .await
        .expect("the flight port accepts connections once the node is ready");
    FlightServiceClient::new(channel)
}

/// `message` with the token (if any) and the database header.
fn call<T>(message: T, token: Option<&str>, database: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("ascii");
        request.metadata_mut().insert("authorization", value);
    }
    request
        .metadata_mut()
        .insert("database", database.parse().expect("ascii"));
    request
}

async fn flight_info(
    client: &mut FlightServiceClient<Channel>,
    sql: &str,
    token: Option<&str>,
    database: &str,
) -> Result<FlightInfo, Status> {
    let command = CommandStatementQuery {
        query: sql.to_string(),
        transaction_id: None,
    };
    let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
    Ok(client
        .get_flight_info(call(descriptor, token, database))
        .await?
        .into_inner())
}

async fn do_get(
    client: &mut FlightServiceClient<Channel>,
    ticket: Ticket,
    token: Option<&str>,
    database: &str,
) -> Result<Vec<RecordBatch>, Status> {
    let stream = client
        .do_get(call(ticket, token, database))
        .await?
        .into_inner();
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(Status::from)
}

/// What the HTTP API answers for `sql`, as Arrow batches.
async fn http_batches(node: &Node, database: &str, sql: &str) -> Vec<RecordBatch> {
    let body = node
        .client
        .post(format!("{}/api/v1/query/arrow", node.url))
        .bearer_auth(TOKEN)
        .header("x-arc-database", database)
        .json(&serde_json::json!({ "sql": sql }))
        .send()
        .await
        .expect("query sent")
        .bytes()
        .await
        .expect("query body");
    StreamReader::try_new(std::io::Cursor::new(body), None)
        .expect("an Arrow IPC stream")
        .collect::<Result<_, _>>()
        .expect("IPC batches")
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    let schema = batches.first().expect("at least one batch").schema();
    arrow::compute::concat_batches(&schema, batches).expect("same schema")
}

#[tokio::test]
async fn flight_sql_answers_as_http_does_and_errors_carry_grpc_codes() {
    let dir = tempfile::tempdir().unwrap();
    let flight_port = free_port();
    let node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_FLIGHT_ADDR", format!("127.0.0.1:{flight_port}")),
    )
    .await;
    let (status, _) = node
        .write_lp(
            "/api/v2/write?bucket=demo&precision=s",
            "cpu,host=a usage=1.5,count=1i 1700000000\n\
             cpu,host=b usage=2.5,count=2i 1700000001\n\
             cpu,host=a usage=3.5,count=3i 1700000002",
        )
        .await;
    assert_eq!(status, 204);
    let mut client = client(flight_port).await;
    let sql = "SELECT time, host, usage, count FROM cpu ORDER BY time";

    // A statement: planned at GetFlightInfo (schema known), run at DoGet.
    let info = flight_info(&mut client, sql, Some(TOKEN), "demo")
        .await
        .expect("GetFlightInfo");
    let schema = info.clone().try_decode_schema().expect("a schema");
    assert_eq!(schema.fields().len(), 4);
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let flight = do_get(&mut client, ticket, Some(TOKEN), "demo")
        .await
        .expect("DoGet");
    let http = http_batches(&node, "demo", sql).await;
    assert_eq!(concat(&flight), concat(&http));
    assert_eq!(concat(&flight).num_rows(), 3);

    // InfluxDB 3's JSON ticket, as its client libraries send it.
    let influx = serde_json::json!({"database": "demo", "sql_query": sql, "query_type": "sql"});
    let ticket = Ticket::new(influx.to_string());
    let flight = do_get(&mut client, ticket, Some(TOKEN), "other")
        .await
        .expect("DoGet with an InfluxDB 3 ticket");
    assert_eq!(concat(&flight), concat(&http));

    // Bad SQL: InvalidArgument, with the engine's message.
    let err = flight_info(&mut client, "SELECT nope FROM cpu", Some(TOKEN), "demo")
        .await
        .expect_err("bad SQL is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("nope"), "{}", err.message());

    // A write is refused as the sandbox refuses it over HTTP.
    let err = flight_info(&mut client, "DROP TABLE cpu", Some(TOKEN), "demo")
        .await
        .expect_err("DDL is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // No token, or a wrong one: Unauthenticated, for planning and for fetching alike.
    let err = flight_info(&mut client, sql, None, "demo")
        .await
        .expect_err("no token");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    let err = flight_info(&mut client, sql, Some("wrong"), "demo")
        .await
        .expect_err("wrong token");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let err = do_get(&mut client, ticket, None, "demo")
        .await
        .expect_err("a ticket is no token");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

    // A foreign ticket is refused, not trusted.
    let err = do_get(&mut client, Ticket::new("garbage"), Some(TOKEN), "demo")
        .await
        .expect_err("garbage ticket");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

#[tokio::test]
async fn with_auth_off_flight_sql_needs_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let flight_port = free_port();
    let _node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_FLIGHT_ADDR", format!("127.0.0.1:{flight_port}"))
            .with("QUIVER_AUTH_ENABLED", "false"),
    )
    .await;
    let mut client = client(flight_port).await;
    let info = flight_info(&mut client, "SELECT 1 AS one", None, "default")
        .await
        .expect("no token needed");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let batches = do_get(&mut client, ticket, None, "default")
        .await
        .expect("DoGet");
    assert_eq!(concat(&batches).num_rows(), 1);
}
