//! Reading a request body within limits: the size as sent, and after gzip or zstd
//! decompression (detected by magic bytes as well as `Content-Encoding`). Both limits
//! are enforced while streaming, so a compression bomb is refused before it inflates.

use std::io::Read;

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;

use super::error::ApiError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Reads the whole body, refusing more than `bytes_max` (413) as it arrives.
pub async fn read_limited(
    body: Body,
    headers: &HeaderMap,
    bytes_max: usize,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > bytes_max as u64) {
        return Err(ApiError::too_large(format!(
            "request body exceeds http.body_bytes_max ({bytes_max} bytes)"
        )));
    }
    let mut out = Vec::with_capacity(
        declared
            .map(|n| n as usize)
            .unwrap_or(64 * 1024)
            .min(bytes_max),
    );
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?;
        if out.len() + chunk.len() > bytes_max {
            return Err(ApiError::too_large(format!(
                "request body exceeds http.body_bytes_max ({bytes_max} bytes)"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

/// Decompresses gzip or zstd bodies (by `Content-Encoding` or magic bytes), refusing
/// output beyond `bytes_max` (413) without ever holding more than that.
pub fn decompress(body: Bytes, headers: &HeaderMap, bytes_max: usize) -> Result<Bytes, ApiError> {
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let gzip = encoding == "gzip" || body.starts_with(&GZIP_MAGIC);
    let zstd = encoding == "zstd" || body.starts_with(&ZSTD_MAGIC);
    if !encoding.is_empty() && encoding != "identity" && !gzip && !zstd {
        return Err(ApiError::with_status(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("unsupported Content-Encoding {encoding:?}; use gzip or zstd"),
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
    fn a_gzip_bomb_is_refused_at_the_limit() {
        let bomb = gzip(&vec![0u8; 50 * 1024 * 1024]);
        assert!(bomb.len() < 100 * 1024);
        let err = decompress(bomb, &HeaderMap::new(), 1024 * 1024).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
    }
}
