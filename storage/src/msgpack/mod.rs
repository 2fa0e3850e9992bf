//! Arc's MessagePack write format, decoded straight into Arrow.
//!
//! Accepted shapes (API.md): a columnar object `{"m", "columns", "tags"?}`, a row object
//! `{"m", "t", "tags", "fields", "h"}`, `{"batch": [objects]}`, or a top-level array of
//! objects. Any error rejects the whole payload with a message naming the column or row.

mod columnar;
mod cursor;
mod row;
mod time;

use std::collections::HashMap;

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::rows::RowBatchBuilder;
use cursor::{Cursor, Token};

/// Most objects one payload may hold (columnar objects or rows).
const OBJECTS_MAX: usize = 10_000_000;

/// Decodes a MessagePack payload into one batch per measurement part, in payload order.
/// `now_ns` stamps rows that carry no time.
pub fn decode_msgpack(payload: &[u8], now_ns: i64) -> Result<Vec<(String, RecordBatch)>> {
    let mut decoder = Decoder {
        now_ns,
        out: Vec::new(),
        builders: HashMap::new(),
        order: Vec::new(),
        rows: 0,
    };
    let mut cur = Cursor::new(payload);
    let token = cur.token()?;
    decoder.item(&mut cur, token, 0)?;
    if !cur.at_end() {
        return Err(cur.error("trailing bytes after the payload"));
    }
    for name in decoder.order {
        if let Some(builder) = decoder.builders.remove(&name) {
            if let Some(batch) = builder.finish()? {
                decoder.out.push((name, batch));
            }
        }
    }
    if decoder.out.is_empty() {
        return Err(Error::InvalidPayload(
            "msgpack: payload holds no rows".into(),
        ));
    }
    Ok(decoder.out)
}

struct Decoder {
    now_ns: i64,
    out: Vec<(String, RecordBatch)>,
    builders: HashMap<String, RowBatchBuilder>,
    order: Vec<String>,
    rows: usize,
}

impl Decoder {
    fn item<'a>(&mut self, cur: &mut Cursor<'a>, token: Token<'a>, depth: usize) -> Result<()> {
        match token {
            Token::Map(n) => self.object(cur, n, depth),
            Token::Array(n) if depth == 0 => self.list(cur, n, depth),
            other => Err(cur.error(format!("expected an object, got {}", other.type_name()))),
        }
    }

    fn list(&mut self, cur: &mut Cursor<'_>, n: usize, depth: usize) -> Result<()> {
        if n > OBJECTS_MAX {
            return Err(cur.error(format!("more than {OBJECTS_MAX} objects")));
        }
        for _ in 0..n {
            let t = cur.token()?;
            self.item(cur, t, depth + 1)?;
        }
        Ok(())
    }

    fn object<'a>(&mut self, cur: &mut Cursor<'a>, entries: usize, depth: usize) -> Result<()> {
        let mut measurement: Option<String> = None;
        let mut columns: Option<columnar::Columns> = None;
        let mut tag_names: Option<Vec<String>> = None;
        let mut row = row::Row::default();
        let mut host: Option<&'a str> = None;
        let mut batch_seen = false;
        for _ in 0..entries {
            let key = cur.string("object key")?;
            match key {
                "m" => measurement = Some(cur.string("\"m\"")?.to_string()),
                "columns" => {
                    let parts = columns.get_or_insert_with(Default::default);
                    columnar::read_columns(cur, parts)?;
                }
                "tags" => match cur.token()? {
                    Token::Array(n) => tag_names = Some(columnar::read_tag_names(cur, n)?),
                    Token::Map(n) => row::read_tags(cur, n, &mut row)?,
                    Token::Nil => {}
                    other => {
                        return Err(cur.error(format!(
                            "\"tags\" must be an array or a map, got {}",
                            other.type_name()
                        )))
                    }
                },
                "fields" => row::read_fields(cur, &mut row)?,
                "t" => row.time = Some(row::read_time(cur)?),
                "h" => host = Some(cur.string("\"h\"")?),
                "batch" if depth == 0 => {
                    batch_seen = true;
                    match cur.token()? {
                        Token::Array(n) => self.list(cur, n, depth)?,
                        other => {
                            return Err(cur.error(format!(
                                "\"batch\" must be an array, got {}",
                                other.type_name()
                            )))
                        }
                    }
                }
                _ => {
                    let t = cur.token()?;
                    cur.skip(t)?;
                }
            }
        }
        if let Some(parts) = columns {
            let measurement =
                measurement.ok_or_else(|| cur.error("columnar object lacks \"m\""))?;
            let batch =
                columnar::finish_columnar(measurement, parts, tag_names.as_deref(), self.now_ns)?;
            self.out.push(batch);
            return Ok(());
        }
        if row.has_fields {
            let measurement = measurement.ok_or_else(|| cur.error("row object lacks \"m\""))?;
            if let Some(h) = host {
                if !row.tags.iter().any(|(k, _)| *k == "host") {
                    row.tags.push(("host", h));
                }
            }
            self.rows += 1;
            if self.rows > OBJECTS_MAX {
                return Err(cur.error(format!("more than {OBJECTS_MAX} rows")));
            }
            return row::push_row(
                &mut self.builders,
                &mut self.order,
                measurement,
                row,
                self.now_ns,
                self.rows,
            );
        }
        if batch_seen {
            return Ok(());
        }
        Err(cur.error("object has neither \"columns\", \"fields\" nor \"batch\""))
    }
}

#[cfg(test)]
mod tests;
