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

/// What a metadata command answers: `GetFlightInfo` for its descriptor, then `DoGet`.
async fn metadata_batches(
    client: &mut FlightServiceClient<Channel>,
    command: Vec<u8>,
) -> RecordBatch {
    let descriptor = FlightDescriptor::new_cmd(command);
    let info = client
        .get_flight_info(call(descriptor, Some(TOKEN), "default"))
        .await
        .expect("GetFlightInfo")
        .into_inner();
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    concat(
        &do_get(client, ticket, Some(TOKEN), "default")
            .await
            .expect("DoGet"),
    )
}

#[tokio::test]
async fn type_info_and_sql_info_answer_what_jdbc_drivers_read() {
    use arrow::array::AsArray;
    use arrow_flight::sql::{CommandGetSqlInfo, CommandGetXdbcTypeInfo, SqlInfo, XdbcDataType};

    let dir = tempfile::tempdir().unwrap();
    let flight_port = free_port();
    let _node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_FLIGHT_ADDR", format!("127.0.0.1:{flight_port}")),
    )
    .await;
    let mut client = client(flight_port).await;

    let all = CommandGetXdbcTypeInfo { data_type: None };
    let types = metadata_batches(&mut client, all.as_any().encode_to_vec()).await;
    let names: Vec<String> = types
        .column_by_name("type_name")
        .expect("type_name")
        .as_string::<i32>()
        .iter()
        .flatten()
        .map(str::to_string)
        .collect();
    for name in ["BOOLEAN", "BIGINT", "DOUBLE", "VARCHAR", "TIMESTAMP"] {
        assert!(names.iter().any(|n| n == name), "{names:?}");
    }
    let one = CommandGetXdbcTypeInfo {
        data_type: Some(XdbcDataType::XdbcTimestamp as i32),
    };
    let timestamps = metadata_batches(&mut client, one.as_any().encode_to_vec()).await;
    assert_eq!(timestamps.num_rows(), 1);

    let wanted = [
        SqlInfo::FlightSqlServerName,
        SqlInfo::SqlIdentifierCase,
        SqlInfo::SqlNullOrdering,
        SqlInfo::SqlKeywords,
        SqlInfo::SqlNumericFunctions,
        SqlInfo::SqlStringFunctions,
        SqlInfo::SqlDatetimeFunctions,
        SqlInfo::SqlSearchStringEscape,
        SqlInfo::SqlSupportsColumnAliasing,
    ];
    let info = CommandGetSqlInfo {
        info: wanted.iter().map(|i| *i as u32).collect(),
    };
    let answered = metadata_batches(&mut client, info.as_any().encode_to_vec()).await;
    let ids = answered
        .column(0)
        .as_primitive::<arrow::datatypes::UInt32Type>();
    let mut got: Vec<u32> = (0..ids.len()).map(|i| ids.value(i)).collect();
    got.sort_unstable();
    let mut want: Vec<u32> = wanted.iter().map(|i| *i as u32).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every key a JDBC driver reads is answered");
}

/// Sends `CancelFlightInfo` for `info`; the status the server answers.
async fn cancel_flight_info(
    client: &mut FlightServiceClient<Channel>,
    info: &FlightInfo,
) -> arrow_flight::CancelStatus {
    let request = arrow_flight::CancelFlightInfoRequest {
        info: Some(info.clone()),
    };
    let action = arrow_flight::Action {
        r#type: "CancelFlightInfo".into(),
        body: request.encode_to_vec().into(),
    };
    let mut results = client
        .do_action(call(action, Some(TOKEN), "demo"))
        .await
        .expect("CancelFlightInfo")
        .into_inner();
    let result = results
        .message()
        .await
        .expect("an answer")
        .expect("one result");
    let answer = arrow_flight::CancelFlightInfoResult::decode(result.body)
        .expect("a CancelFlightInfoResult");
    arrow_flight::CancelStatus::try_from(answer.status).expect("a known status")
}

#[tokio::test]
async fn cancel_flight_info_stops_a_running_query_and_refuses_its_ticket_later() {
    use arrow_flight::CancelStatus;

    let dir = tempfile::tempdir().unwrap();
    let flight_port = free_port();
    let node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_FLIGHT_ADDR", format!("127.0.0.1:{flight_port}")),
    )
    .await;
    // 300,000 rows: far more than HTTP/2's windows hold, so the query is still
    // producing when the cancel arrives.
    for part in 0..3 {
        let body: String = (0..100_000)
            .map(|i| {
                let n = part * 100_000 + i;
                format!(
                    "cpu,host=h{} usage={n}.5 {}\n",
                    n % 50,
                    1_700_000_000_000i64 + n
                )
            })
            .collect();
        let (status, answer) = node
            .write_lp("/api/v2/write?bucket=demo&precision=ms", &body)
            .await;
        assert_eq!(status, 204, "{answer}");
    }
    let mut client = client(flight_port).await;
    let sql = "SELECT time, host, usage FROM cpu";

    // Cancelled before its DoGet: nothing was running, and the ticket runs no more.
    let early = flight_info(&mut client, sql, Some(TOKEN), "demo")
        .await
        .expect("GetFlightInfo");
    assert_eq!(
        cancel_flight_info(&mut client, &early).await,
        CancelStatus::NotCancellable
    );
    let ticket = early.endpoint[0].ticket.clone().expect("a ticket");
    let err = do_get(&mut client, ticket, Some(TOKEN), "demo")
        .await
        .expect_err("a cancelled ticket is refused");
    assert_eq!(err.code(), Code::Cancelled, "{err:?}");

    // Another FlightInfo of the same SQL is another run: cancelling the first left it.
    let info = flight_info(&mut client, sql, Some(TOKEN), "demo")
        .await
        .expect("GetFlightInfo");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let mut stream = client
        .do_get(call(ticket, Some(TOKEN), "demo"))
        .await
        .expect("DoGet starts")
        .into_inner();
    assert!(stream.message().await.expect("a first message").is_some());
    assert_eq!(
        cancel_flight_info(&mut client, &info).await,
        CancelStatus::Cancelled
    );
    let ended = loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended as if complete after a cancel"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), Code::Cancelled, "{ended:?}");
    // The node still answers the same query in full.
    let info = flight_info(&mut client, "SELECT count(*) FROM cpu", Some(TOKEN), "demo")
        .await
        .expect("GetFlightInfo");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let batches = do_get(&mut client, ticket, Some(TOKEN), "demo")
        .await
        .expect("DoGet");
    assert_eq!(concat(&batches).num_rows(), 1);
}
