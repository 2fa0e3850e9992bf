//! The statements of one simple query: clients send several at once, separated by
//! semicolons (Npgsql loads its types with four in one message; scripts pasted into a
//! console do the same), and Postgres runs them in order.
//!
//! Split with DataFusion's own SQL tokenizer, so a semicolon inside a string, a quoted
//! name, a comment or a dollar-quoted body never splits; each statement keeps its
//! original text, because the door's rewrites and local answers match the text the
//! client sent.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, Tokenizer};

/// The statements of `sql`, in order, each without its `;` and the whitespace and
/// comments before it (the door's own answers match a statement's first words), and
/// without the ones that are only whitespace or comments. Text the tokenizer refuses (an unterminated string)
/// is one statement, for the engine to report where it breaks.
pub fn split_statements(sql: &str) -> Vec<&str> {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        return vec![sql];
    };
    let lines = line_starts(sql);
    let mut out = Vec::new();
    // Where the statement being read starts: its first token that is not whitespace
    // or a comment.
    let mut start: Option<usize> = None;
    for token in &tokens {
        match token.token {
            Token::SemiColon => {
                let Some(end) = byte_offset(sql, &lines, token.span.start, |b| b == b';') else {
                    return vec![sql];
                };
                if let Some(start) = start.take() {
                    out.push(sql[start..end].trim());
                }
            }
            Token::Whitespace(_) => {}
            _ if start.is_none() => {
                let Some(at) = byte_offset(sql, &lines, token.span.start, |_| true) else {
                    return vec![sql];
                };
                start = Some(at);
            }
            _ => {}
        }
    }
    if let Some(start) = start {
        out.push(sql[start..].trim());
    }
    debug_assert!(out.iter().all(|s| !s.is_empty()));
    out
}

/// Byte offsets where each line of `sql` starts (line 1 first).
fn line_starts(sql: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// The byte offset of a tokenizer location (1-based line, 1-based column in chars),
/// if the byte there is what `expected` accepts.
fn byte_offset(
    sql: &str,
    lines: &[usize],
    at: Location,
    expected: impl Fn(u8) -> bool,
) -> Option<usize> {
    let line_start = *lines.get(usize::try_from(at.line).ok()?.checked_sub(1)?)?;
    let column = usize::try_from(at.column).ok()?.checked_sub(1)?;
    let rest = sql.get(line_start..)?;
    let offset = match rest.char_indices().nth(column) {
        Some((i, _)) => i,
        None => rest.len(),
    };
    let found = line_start + offset;
    sql.as_bytes()
        .get(found)
        .is_some_and(|b| expected(*b))
        .then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_at_semicolons_outside_strings_names_comments_and_dollar_quotes() {
        assert_eq!(split_statements("SELECT 1"), vec!["SELECT 1"]);
        assert_eq!(
            split_statements("SELECT version();\n\nSELECT 2 ;  "),
            vec!["SELECT version()", "SELECT 2"]
        );
        assert_eq!(
            split_statements("SELECT ';' AS \"a;b\" -- c;d\n; -- x;\n/* y; */ SHOW é"),
            vec!["SELECT ';' AS \"a;b\" -- c;d", "SHOW é"]
        );
        assert_eq!(
            split_statements("/* x; */ SELECT $$a;b$$;;; SELECT 'it''s;'"),
            vec!["SELECT $$a;b$$", "SELECT 'it''s;'"]
        );
        assert_eq!(
            split_statements(" ; -- only a comment\n"),
            Vec::<&str>::new()
        );
        assert_eq!(split_statements("SELECT 'open;"), vec!["SELECT 'open;"]);
    }

    proptest! {
        /// Statements joined with `;` come back as they were, whatever their strings.
        #[test]
        fn joined_statements_split_back(words in prop::collection::vec("[a-zé;' ]{0,12}", 1..5)) {
            let statements: Vec<String> = words
                .iter()
                .map(|w| format!("SELECT '{}'", w.replace('\'', "''")))
                .collect();
            let sql = statements.join(";\n");
            let split = split_statements(&sql);
            prop_assert_eq!(split, statements.iter().map(String::as_str).collect::<Vec<_>>());
        }

        /// Never panics, and every piece is a trimmed, non-empty slice of the input.
        #[test]
        fn any_text_splits_into_pieces_of_itself(sql in "\\PC{0,80}") {
            for piece in split_statements(&sql) {
                prop_assert!(!piece.is_empty());
                prop_assert!(sql.contains(piece));
            }
        }
    }
}
