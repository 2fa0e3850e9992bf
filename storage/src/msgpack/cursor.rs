//! A bounds-checked MessagePack token reader over a byte slice.
//!
//! Hand-written rather than serde-driven because the decoder's hot loop reads millions
//! of scalars straight into Arrow builders and must name the byte offset of anything it
//! cannot accept. Every read checks bounds; nesting depth is capped.

use rmp::Marker;

use crate::error::{Error, Result};

/// Deepest nesting `skip` follows before refusing the payload.
const DEPTH_MAX: usize = 32;

/// One MessagePack item header, with scalars decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Token<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a str),
    Bin(&'a [u8]),
    Array(usize),
    Map(usize),
    Ext,
}

impl Token<'_> {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Token::Nil => "nil",
            Token::Bool(_) => "boolean",
            Token::Int(_) | Token::UInt(_) => "integer",
            Token::Float(_) => "float",
            Token::Str(_) => "string",
            Token::Bin(_) => "binary",
            Token::Array(_) => "array",
            Token::Map(_) => "map",
            Token::Ext => "extension",
        }
    }
}

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes not read yet: an upper bound on how many values can still follow, so a
    /// declared array length never sizes an allocation beyond what the body can hold.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn error(&self, what: impl std::fmt::Display) -> Error {
        Error::InvalidPayload(format!("msgpack: {what} (at byte {})", self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let out = &self.buf[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(self.error("truncated payload")),
        }
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn str_of(&mut self, len: usize) -> Result<&'a str> {
        let start = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| {
            Error::InvalidPayload(format!(
                "msgpack: string is not valid UTF-8 (at byte {start})"
            ))
        })
    }

    /// Reads the next item's header; for strings and binaries the payload too.
    pub(crate) fn token(&mut self) -> Result<Token<'a>> {
        let byte = self.be::<1>()?[0];
        Ok(match Marker::from_u8(byte) {
            Marker::FixPos(v) => Token::Int(i64::from(v)),
            Marker::FixNeg(v) => Token::Int(i64::from(v)),
            Marker::Null => Token::Nil,
            Marker::True => Token::Bool(true),
            Marker::False => Token::Bool(false),
            Marker::U8 => Token::Int(i64::from(self.be::<1>()?[0])),
            Marker::U16 => Token::Int(i64::from(u16::from_be_bytes(self.be()?))),
            Marker::U32 => Token::Int(i64::from(u32::from_be_bytes(self.be()?))),
            Marker::U64 => {
                let v = u64::from_be_bytes(self.be()?);
                match i64::try_from(v) {
                    Ok(v) => Token::Int(v),
                    Err(_) => Token::UInt(v),
                }
            }
            Marker::I8 => Token::Int(i64::from(i8::from_be_bytes(self.be()?))),
            Marker::I16 => Token::Int(i64::from(i16::from_be_bytes(self.be()?))),
            Marker::I32 => Token::Int(i64::from(i32::from_be_bytes(self.be()?))),
            Marker::I64 => Token::Int(i64::from_be_bytes(self.be()?)),
            Marker::F32 => Token::Float(f64::from(f32::from_be_bytes(self.be()?))),
            Marker::F64 => Token::Float(f64::from_be_bytes(self.be()?)),
            Marker::FixStr(n) => Token::Str(self.str_of(usize::from(n))?),
            Marker::Str8 => {
                let n = usize::from(self.be::<1>()?[0]);
                Token::Str(self.str_of(n)?)
            }
            Marker::Str16 => {
                let n = usize::from(u16::from_be_bytes(self.be()?));
                Token::Str(self.str_of(n)?)
            }
            Marker::Str32 => {
                let n = u32::from_be_bytes(self.be()?) as usize;
                Token::Str(self.str_of(n)?)
            }
            Marker::Bin8 => {
                let n = usize::from(self.be::<1>()?[0]);
                Token::Bin(self.take(n)?)
            }
            Marker::Bin16 => {
                let n = usize::from(u16::from_be_bytes(self.be()?));
                Token::Bin(self.take(n)?)
            }
            Marker::Bin32 => {
                let n = u32::from_be_bytes(self.be()?) as usize;
                Token::Bin(self.take(n)?)
            }
            Marker::FixArray(n) => Token::Array(usize::from(n)),
            Marker::Array16 => Token::Array(usize::from(u16::from_be_bytes(self.be()?))),
            Marker::Array32 => Token::Array(u32::from_be_bytes(self.be()?) as usize),
            Marker::FixMap(n) => Token::Map(usize::from(n)),
            Marker::Map16 => Token::Map(usize::from(u16::from_be_bytes(self.be()?))),
            Marker::Map32 => Token::Map(u32::from_be_bytes(self.be()?) as usize),
            Marker::FixExt1 => self.skip_ext(1)?,
            Marker::FixExt2 => self.skip_ext(2)?,
            Marker::FixExt4 => self.skip_ext(4)?,
            Marker::FixExt8 => self.skip_ext(8)?,
            Marker::FixExt16 => self.skip_ext(16)?,
            Marker::Ext8 => {
                let n = usize::from(self.be::<1>()?[0]);
                self.skip_ext(n)?
            }
            Marker::Ext16 => {
                let n = usize::from(u16::from_be_bytes(self.be()?));
                self.skip_ext(n)?
            }
            Marker::Ext32 => {
                let n = u32::from_be_bytes(self.be()?) as usize;
                self.skip_ext(n)?
            }
            Marker::Reserved => return Err(self.error("reserved marker 0xc1")),
        })
    }

    fn skip_ext(&mut self, len: usize) -> Result<Token<'a>> {
        self.take(1 + len)?;
        Ok(Token::Ext)
    }

    /// Reads a string, or explains what was there instead.
    pub(crate) fn string(&mut self, what: &str) -> Result<&'a str> {
        match self.token()? {
            Token::Str(s) => Ok(s),
            other => Err(self.error(format!(
                "{what} must be a string, got {}",
                other.type_name()
            ))),
        }
    }

    /// Skips the rest of an item whose header was `token`.
    pub(crate) fn skip(&mut self, token: Token<'a>) -> Result<()> {
        self.skip_depth(token, 0)
    }

    fn skip_depth(&mut self, token: Token<'a>, depth: usize) -> Result<()> {
        if depth > DEPTH_MAX {
            return Err(self.error(format!("nesting deeper than {DEPTH_MAX}")));
        }
        let items = match token {
            Token::Array(n) => n,
            Token::Map(n) => n
                .checked_mul(2)
                .ok_or_else(|| self.error("map too large"))?,
            _ => return Ok(()),
        };
        for _ in 0..items {
            let t = self.token()?;
            self.skip_depth(t, depth + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_scalar_width() {
        let mut buf = Vec::new();
        rmp::encode::write_uint(&mut buf, 5).unwrap();
        rmp::encode::write_uint(&mut buf, 300).unwrap();
        rmp::encode::write_uint(&mut buf, u64::MAX).unwrap();
        rmp::encode::write_sint(&mut buf, -100_000).unwrap();
        rmp::encode::write_f32(&mut buf, 1.5).unwrap();
        rmp::encode::write_f64(&mut buf, -2.25).unwrap();
        rmp::encode::write_str(&mut buf, "héllo").unwrap();
        rmp::encode::write_nil(&mut buf).unwrap();
        let mut c = Cursor::new(&buf);
        assert_eq!(c.token().unwrap(), Token::Int(5));
        assert_eq!(c.token().unwrap(), Token::Int(300));
        assert_eq!(c.token().unwrap(), Token::UInt(u64::MAX));
        assert_eq!(c.token().unwrap(), Token::Int(-100_000));
        assert_eq!(c.token().unwrap(), Token::Float(1.5));
        assert_eq!(c.token().unwrap(), Token::Float(-2.25));
        assert_eq!(c.token().unwrap(), Token::Str("héllo"));
        assert_eq!(c.token().unwrap(), Token::Nil);
        assert!(c.at_end());
    }

    #[test]
    fn truncated_and_invalid_input_is_an_error_not_a_panic() {
        let mut c = Cursor::new(&[0xdb, 0, 0, 0, 9, b'a']);
        assert!(c.token().unwrap_err().to_string().contains("truncated"));
        let mut c = Cursor::new(&[0xa2, 0xff, 0xfe]);
        assert!(c.token().unwrap_err().to_string().contains("UTF-8"));
        let mut c = Cursor::new(&[0xc1]);
        assert!(c.token().is_err());
        let deep = vec![0x91u8; 100];
        let mut c = Cursor::new(&deep);
        let t = c.token().unwrap();
        assert!(c.skip(t).is_err());
    }
}
