//! A protobuf reader that borrows from the body: fields come out as numbers or slices of
//! the input, so decoding a request allocates nothing per label or sample. Varints are
//! read with prost's own decoder; this file only walks keys and lengths.

use prost::encoding::decode_varint;

/// One field's value as it appears on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    /// Wire type 0: int32/int64/uint64/bool/enum.
    Varint(u64),
    /// Wire type 1: double/fixed64/sfixed64.
    Fixed64(u64),
    /// Wire type 2: string/bytes/embedded message/packed repeated.
    Bytes(&'a [u8]),
    /// Wire type 5: float/fixed32/sfixed32.
    Fixed32,
}

impl Value<'_> {
    /// The wire type's name, for errors.
    pub(crate) fn wire_name(&self) -> &'static str {
        match self {
            Value::Varint(_) => "a varint",
            Value::Fixed64(_) => "a 64-bit value",
            Value::Bytes(_) => "a length-delimited value",
            Value::Fixed32 => "a 32-bit value",
        }
    }
}

/// The fields of one message, in wire order.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over one message's bytes.
    pub(crate) fn new(message: &'a [u8]) -> Self {
        Reader { rest: message }
    }

    /// The next field (its number and value), `None` at the end of the message, or why
    /// the bytes are not a protobuf message.
    pub(crate) fn next_field(&mut self) -> Result<Option<(u64, Value<'a>)>, String> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let key = self.varint("a field key")?;
        let number = key >> 3;
        if number == 0 {
            return Err("field number 0".into());
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint("a varint field")?),
            1 => Value::Fixed64(u64::from_le_bytes(self.fixed::<8>()?)),
            2 => {
                let len = self.varint("a length")?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= self.rest.len())
                    .ok_or_else(|| {
                        format!(
                            "field {number} claims {len} bytes, {} remain",
                            self.rest.len()
                        )
                    })?;
                let (bytes, rest) = self.rest.split_at(len);
                self.rest = rest;
                Value::Bytes(bytes)
            }
            5 => {
                self.fixed::<4>()?;
                Value::Fixed32
            }
            other => {
                return Err(format!(
                    "field {number} has wire type {other} (groups are not used by remote write)"
                ))
            }
        };
        Ok(Some((number, value)))
    }

    fn varint(&mut self, what: &str) -> Result<u64, String> {
        decode_varint(&mut self.rest).map_err(|e| format!("{what} is not a varint: {e}"))
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let Some((head, rest)) = self.rest.split_first_chunk::<N>() else {
            return Err(format!(
                "a {N}-byte value is cut short ({} bytes remain)",
                self.rest.len()
            ));
        };
        self.rest = rest;
        Ok(*head)
    }
}
