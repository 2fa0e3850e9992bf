//! Reading a request body within limits: the size as sent, and after gzip or zstd
//! decompression (detected by magic bytes as well as `Content-Encoding`), or snappy
//! (Prometheus remote write; by `Content-Encoding` only: its block format has no magic).
//! Both limits are enforced while streaming, or for snappy from the length its block
//! declares up front, so a compression bomb is refused before it inflates.

use std::io::Read;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use futures::StreamExt;

use super::admission::{charge_error, Charge, WriteBudget};
use super::error::ApiError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The `Content-Length` a client declared, if any.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Whether the client waits for `100 Continue` before sending its body.
pub fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get("expect")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

/// Reads the whole body, refusing more than `bytes_max` (413) as it arrives and a body
/// still incomplete at `deadline` (408). Bytes beyond what `charge` already covers
/// (a body without `Content-Length`) are charged to `budget` as they arrive.
pub async fn read_limited(
    body: Body,
    headers: &HeaderMap,
    bytes_max: usize,
    deadline: Instant,
    budget: &WriteBudget,
    charge: &mut Charge,
) -> Result<Bytes, ApiError> {
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > bytes_max as u64) {
        let error = ApiError::too_large(format!(
            "request body exceeds http.body_bytes_max ({bytes_max} bytes)"
        ));
        discard_body(body, bytes_max, deadline).await;
        return Err(error);
    }
    let mut out = Vec::with_capacity(
        declared
            .map(|n| n as usize)
            .unwrap_or(64 * 1024)
            .min(bytes_max),
    );
    let mut stream = body.into_data_stream();
    loop {
        let next = match tokio::time::timeout_at(deadline.into(), stream.next()).await {
            Ok(next) => next,
            Err(_) => {
                return Err(ApiError::with_status(
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body did not arrive within http.body_timeout_ms",
                ))
            }
        };
        let Some(chunk) = next else { break };
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?;
        let refusal = if out.len() + chunk.len() > bytes_max {
            Some(ApiError::too_large(format!(
                "request body exceeds http.body_bytes_max ({bytes_max} bytes)"
            )))
        } else {
            out.extend_from_slice(&chunk);
            let covered = u64::from(charge.kib()) * 1024;
            if out.len() as u64 > covered {
                budget
                    .try_charge(charge, out.len() - covered as usize)
                    .err()
                    .map(charge_error)
            } else {
                None
            }
        };
        if let Some(refusal) = refusal {
            drop(out);
            discard_stream(&mut stream, bytes_max, deadline).await;
            return Err(refusal);
        }
    }
    Ok(Bytes::from(out))
}

/// Reads and throws away up to `bytes_max` of a body (until `deadline`), so that a
/// refusal sent afterwards reaches a client that was still sending.
pub async fn discard_body(body: Body, bytes_max: usize, deadline: Instant) {
    discard_stream(&mut body.into_data_stream(), bytes_max, deadline).await;
}

async fn discard_stream(
    stream: &mut axum::body::BodyDataStream,
    bytes_max: usize,
    deadline: Instant,
) {
    let mut seen = 0usize;
    while seen <= bytes_max {
        match tokio::time::timeout_at(deadline.into(), stream.next()).await {
            Ok(Some(Ok(chunk))) => seen += chunk.len(),
            _ => return,
        }
    }
}

/// `body` parsed as JSON into `T`, or a 400 that shows what a valid body looks like.
pub fn json_body<T: for<'de> serde::Deserialize<'de>>(
    body: &[u8],
    example: &str,
) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("body must be JSON like {example}: {e}")))
}

/// Decompresses gzip or zstd bodies (by `Content-Encoding` or magic bytes) and snappy
/// blocks (by `Content-Encoding: snappy`), refusing output beyond `bytes_max` (413)
/// without ever holding more than that.
pub fn decompress(body: Bytes, headers: &HeaderMap, bytes_max: usize) -> Result<Bytes, ApiError> {
    let encoding = content_encoding(headers);
    if encoding == "snappy" {
        return unsnappy(&body, bytes_max);
    }
    let gzip = encoding == "gzip" || body.starts_with(&GZIP_MAGIC);
    let zstd = encoding == "zstd" || body.starts_with(&ZSTD_MAGIC);
    if !encoding.is_empty() && encoding != "identity" && !gzip && !zstd {
        return Err(ApiError::with_status(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("unsupported Content-Encoding {encoding:?}; use gzip, zstd or snappy"),
        ));
    }
    if gzip {
        inflate(
            flate2::read::MultiGzDecoder::new(&body[..]),
            "gzip",
            bytes_max,
        )
    } else if zstd {
        let decoder = zstd::stream::read::Decoder::new(&body[..])
            .map_err(|e| ApiError::bad_request(format!("zstd body: {e}")))?;
        inflate(decoder, "zstd", bytes_max)
    } else if body.len() > bytes_max {
        Err(ApiError::too_large(format!(
            "body exceeds http.decompressed_bytes_max ({bytes_max} bytes)"
        )))
    } else {
        Ok(body)
    }
}

/// The request's `Content-Encoding`, trimmed and lower-case (empty when absent).
pub fn content_encoding(headers: &HeaderMap) -> String {
    headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// A snappy block (not the framed stream format): the length it declares is checked
/// against `bytes_max` before anything is allocated.
fn unsnappy(body: &[u8], bytes_max: usize) -> Result<Bytes, ApiError> {
    let len = snap::raw::decompress_len(body)
        .map_err(|e| ApiError::bad_request(format!("snappy body does not decompress: {e}")))?;
    if len > bytes_max {
        return Err(ApiError::too_large(format!(
            "snappy body inflates to {len} bytes, past http.decompressed_bytes_max ({bytes_max} bytes)"
        )));
    }
    let out = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| ApiError::bad_request(format!("snappy body does not decompress: {e}")))?;
    Ok(Bytes::from(out))
}

fn inflate(reader: impl Read, what: &str, bytes_max: usize) -> Result<Bytes, ApiError> {
    let mut out = Vec::new();
    let mut limited = reader.take(bytes_max as u64 + 1);
    limited
        .read_to_end(&mut out)
        .map_err(|e| ApiError::bad_request(format!("{what} body does not decompress: {e}")))?;
    if out.len() > bytes_max {
        return Err(ApiError::too_large(format!(
            "{what} body inflates past http.decompressed_bytes_max ({bytes_max} bytes)"
        )));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Bytes {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        Bytes::from(e.finish().unwrap())
    }

    #[test]
    fn a_json_body_that_does_not_parse_is_a_400_showing_a_valid_one() {
        #[derive(serde::Deserialize)]
        struct Ids {
            node_ids: Vec<u64>,
        }
        let example = r#"{"node_ids": [4]}"#;
        let ids: Ids = json_body(br#"{"node_ids": [1, 2]}"#, example).unwrap();
        assert_eq!(ids.node_ids, [1, 2]);
        let Err(err) = json_body::<Ids>(br#"{"node_ids": "4"}"#, example) else {
            panic!("a string where numbers belong must not parse");
        };
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(
            err.message
                .starts_with(r#"body must be JSON like {"node_ids": [4]}: "#),
            "{}",
            err.message
        );
    }

    #[test]
    fn gzip_and_zstd_are_detected_by_magic() {
        let h = HeaderMap::new();
        assert_eq!(
            decompress(gzip(b"hello"), &h, 100).unwrap(),
            Bytes::from_static(b"hello")
        );
        let z = zstd::encode_all(&b"world"[..], 3).unwrap();
        assert_eq!(
            decompress(Bytes::from(z), &h, 100).unwrap(),
            Bytes::from_static(b"world")
        );
        assert_eq!(
            decompress(Bytes::from_static(b"plain"), &h, 100).unwrap(),
            Bytes::from_static(b"plain")
        );
    }

    #[test]
    fn snappy_is_taken_from_content_encoding_and_its_declared_length_checked() {
        let mut h = HeaderMap::new();
        h.insert("content-encoding", "Snappy".parse().unwrap());
        let block = snap::raw::Encoder::new()
            .compress_vec(&vec![7u8; 4096])
            .unwrap();
        assert_eq!(
            decompress(Bytes::from(block.clone()), &h, 4096).unwrap(),
            Bytes::from(vec![7u8; 4096])
        );
        let err = decompress(Bytes::from(block), &h, 4095).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        let err = decompress(Bytes::from_static(b"\xff\xff\xff"), &h, 100).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_gzip_bomb_is_refused_at_the_limit() {
        let bomb = gzip(&vec![0u8; 50 * 1024 * 1024]);
        assert!(bomb.len() < 100 * 1024);
        let err = decompress(bomb, &HeaderMap::new(), 1024 * 1024).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
    }
}
