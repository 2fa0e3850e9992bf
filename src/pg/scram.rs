//! The SCRAM-SHA-256 exchange of the Postgres door (RFC 5802 as Postgres speaks it in
//! `AuthenticationSASL` messages), checked against a token's stored verifier.
//!
//! Three messages: the client's first (its nonce), the server's first (the nonce
//! extended, the verifier's salt and iterations), the client's final (its proof); the
//! server's final carries its own signature, which proves to the client that the
//! server holds the verifier. Over TLS the door also offers `SCRAM-SHA-256-PLUS`: the
//! client signs the certificate's `tls-server-end-point` value with its proof
//! ([`super::channel_binding`]), so a login relayed through another TLS endpoint
//! fails. A client that says it could bind (`y`) while the server offered binding is
//! refused, as RFC 5802 §6 requires against a downgrade.
//! What is checked, and against which token, lives in [`crate::scram`] and
//! [`crate::auth`]; this file parses and builds the messages.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::auth::ScramLogin;
use crate::scram::{keys, proof_is_valid, sign};

/// The mechanism offered on every connection.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// The mechanism with channel binding, offered over TLS with a certificate that has a
/// `tls-server-end-point` value.
pub const MECHANISM_PLUS: &str = "SCRAM-SHA-256-PLUS";

/// The one channel-binding type the door binds to (the one libpq and pgjdbc use).
const BINDING_TYPE: &str = "tls-server-end-point";

/// Longest SCRAM message the door reads, in bytes (a real one is under 200).
const MESSAGE_BYTES_MAX: usize = 1_024;

/// Random bytes the server adds to the client's nonce.
const SERVER_NONCE_BYTES: usize = 18;

/// Where a connection's exchange stands; kept in its session extensions.
pub enum Exchange {
    /// `AuthenticationSASL` sent; the client's first message is next.
    Offered(ScramLogin),
    /// The server's first message sent; the client's final message is next.
    Challenged(Challenge),
}

/// The mechanisms to offer: with a channel-binding value (a TLS connection whose
/// certificate has one), the bound one first, as PostgreSQL lists them.
pub fn mechanisms(end_point: Option<&[u8]>) -> Vec<String> {
    match end_point {
        Some(_) => vec![MECHANISM_PLUS.to_string(), MECHANISM.to_string()],
        None => vec![MECHANISM.to_string()],
    }
}

/// What the server remembers between its first message and the client's final one.
pub struct Challenge {
    /// The token being checked.
    pub login: ScramLogin,
    /// What the client's final `c=` attribute must decode to: the GS2 header it sent
    /// first, followed by the certificate's end-point value when it binds.
    binding: Vec<u8>,
    /// `n=...,r=<client nonce>`: the first part of the signed `AuthMessage`.
    client_first_bare: String,
    /// The server's first message: the second part.
    server_first: String,
    /// Client nonce followed by server nonce.
    nonce: String,
}

/// Why an exchange failed. Every case ends the connection with `28P01`.
#[derive(Debug, thiserror::Error)]
pub enum ScramError {
    /// The client picked a mechanism the door did not offer.
    #[error(
        "SASL mechanism {0:?} is not offered here; use SCRAM-SHA-256 (SCRAM-SHA-256-PLUS over TLS)"
    )]
    Mechanism(String),
    /// A message that does not follow RFC 5802.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The channel binding asked for does not match what was offered.
    #[error("SCRAM channel binding: {0}")]
    ChannelBinding(&'static str),
    /// The proof does not come from the token.
    #[error("the proof does not match the token")]
    WrongProof,
    /// The stored verifier does not decode.
    #[error(transparent)]
    Verifier(#[from] crate::scram::CorruptVerifier),
}

/// Reads the client's first message (after `mechanism`) and answers the server's.
///
/// `end_point` is the certificate's channel-binding value when this connection offered
/// `SCRAM-SHA-256-PLUS`, `None` when it offered only `SCRAM-SHA-256`.
pub fn client_first(
    login: ScramLogin,
    mechanism: &str,
    data: &[u8],
    end_point: Option<&[u8]>,
) -> Result<(String, Challenge), ScramError> {
    let bound = match (mechanism, end_point) {
        (MECHANISM, _) => None,
        (MECHANISM_PLUS, Some(hash)) => Some(hash),
        _ => return Err(ScramError::Mechanism(mechanism.to_string())),
    };
    let message = text(data)?;
    // gs2-header = gs2-cbind-flag "," [authzid] ","
    let mut parts = message.splitn(3, ',');
    let flag = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
    let authzid = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
    let bare = parts
        .next()
        .ok_or(ScramError::Malformed("no client-first-message-bare"))?;
    let gs2_header = format!("{flag},,");
    let binding = match (flag, bound) {
        ("n", None) => gs2_header.into_bytes(),
        // `y`: the client could bind but thinks the server cannot. This server offered
        // binding on this connection, so something between them removed it.
        ("y", None) if end_point.is_some() => {
            return Err(ScramError::ChannelBinding(
                "the client was told binding is not offered, but it is: refused as a downgrade",
            ))
        }
        ("y", None) => gs2_header.into_bytes(),
        (f, Some(hash)) if f.strip_prefix("p=") == Some(BINDING_TYPE) => {
            let mut binding = gs2_header.into_bytes();
            binding.extend_from_slice(hash);
            binding
        }
        (f, Some(_)) if f.starts_with("p=") => {
            return Err(ScramError::ChannelBinding(
                "only tls-server-end-point is offered",
            ))
        }
        (_, Some(_)) => {
            return Err(ScramError::ChannelBinding(
                "SCRAM-SHA-256-PLUS needs a p= channel-binding flag",
            ))
        }
        (f, None) if f.starts_with("p=") => {
            return Err(ScramError::ChannelBinding(
                "channel binding needs SCRAM-SHA-256-PLUS, offered over TLS only",
            ))
        }
        _ => return Err(ScramError::Malformed("unknown GS2 channel-binding flag")),
    };
    if !authzid.is_empty() {
        return Err(ScramError::Malformed(
            "an authorization identity is not supported",
        ));
    }
    // client-first-message-bare = username "," nonce ["," extensions]; Postgres
    // clients leave the user name empty (it came in the startup message).
    let mut attributes = bare.split(',');
    let user = attributes.next().unwrap_or_default();
    if !user.starts_with("n=") {
        return Err(ScramError::Malformed("no user name attribute"));
    }
    let client_nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b)))
        .ok_or(ScramError::Malformed("no valid client nonce"))?;
    let server_nonce: [u8; SERVER_NONCE_BYTES] = rand::random();
    let nonce = format!("{client_nonce}{}", STANDARD.encode(server_nonce));
    let server_first = format!(
        "r={nonce},s={},i={}",
        login.secret.salt, login.secret.iterations
    );
    let challenge = Challenge {
        login,
        binding,
        client_first_bare: bare.to_string(),
        server_first: server_first.clone(),
        nonce,
    };
    Ok((server_first, challenge))
}

/// Checks the client's final message; on success returns the server's final message.
pub fn client_final(challenge: &Challenge, data: &[u8]) -> Result<String, ScramError> {
    let message = text(data)?;
    // client-final-message = "c=" cbind "," "r=" nonce ["," extensions] "," "p=" proof
    let (without_proof, proof) = message
        .rsplit_once(",p=")
        .ok_or(ScramError::Malformed("no proof"))?;
    let mut attributes = without_proof.split(',');
    let binding = attributes
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or(ScramError::Malformed("no channel-binding attribute"))?;
    if STANDARD.decode(binding).ok().as_deref() != Some(challenge.binding.as_slice()) {
        return Err(ScramError::ChannelBinding(
            "the c= attribute is not the GS2 header sent first and this server's certificate",
        ));
    }
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(ScramError::Malformed("no nonce"))?;
    if nonce != challenge.nonce {
        return Err(ScramError::Malformed("the nonce is not the server's"));
    }
    let proof = STANDARD
        .decode(proof)
        .map_err(|_| ScramError::Malformed("the proof is not base64"))?;
    let auth_message = format!(
        "{},{},{without_proof}",
        challenge.client_first_bare, challenge.server_first
    );
    let keys = keys(&challenge.login.secret)?;
    if !proof_is_valid(&keys, auth_message.as_bytes(), &proof) {
        return Err(ScramError::WrongProof);
    }
    let signature = sign(&keys.server_key, auth_message.as_bytes());
    Ok(format!("v={}", STANDARD.encode(signature)))
}

fn text(data: &[u8]) -> Result<&str, ScramError> {
    if data.len() > MESSAGE_BYTES_MAX {
        return Err(ScramError::Malformed("message too long"));
    }
    std::str::from_utf8(data).map_err(|_| ScramError::Malformed("not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side of the exchange, as libpq computes it.
    fn client_proof(secret: &str, salt_b64: &str, iterations: u32, auth_message: &str) -> String {
        let salt = STANDARD.decode(salt_b64).unwrap();
        let salted =
            pgwire::api::auth::sasl::scram::gen_salted_password(secret, &salt, iterations as usize);
        let client_key = sign(&salted, b"Client Key");
        let stored_key = ring::digest::digest(&ring::digest::SHA256, &client_key);
        let signature = sign(stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        STANDARD.encode(proof)
    }

    /// A whole exchange as a client does it: `flag` is its GS2 flag, `end_point` what
    /// the server offered, `client_binds_to` the end-point value the client computed.
    fn bound_exchange(
        secret_used: &str,
        mechanism: &str,
        flag: &str,
        end_point: Option<&[u8]>,
        client_binds_to: &[u8],
    ) -> Result<String, ScramError> {
        let login = ScramLogin {
            secret: crate::scram::derive("the-token"),
            token_sha256: String::new(),
        };
        let (salt, iterations) = (login.secret.salt.clone(), login.secret.iterations);
        let first = format!("{flag},,n=,r=abc");
        let (server_first, challenge) =
            client_first(login, mechanism, first.as_bytes(), end_point)?;
        let nonce = server_first
            .split(',')
            .next()
            .and_then(|r| r.strip_prefix("r="))
            .unwrap();
        assert!(nonce.starts_with("abc") && nonce.len() > 3);
        let mut cbind = format!("{flag},,").into_bytes();
        cbind.extend_from_slice(client_binds_to);
        let without_proof = format!("c={},r={nonce}", STANDARD.encode(cbind));
        let auth_message = format!("n=,r=abc,{server_first},{without_proof}");
        let proof = client_proof(secret_used, &salt, iterations, &auth_message);
        client_final(&challenge, format!("{without_proof},p={proof}").as_bytes())
    }

    fn exchange(secret_used: &str) -> Result<String, ScramError> {
        bound_exchange(secret_used, MECHANISM, "n", None, b"")
    }

    #[test]
    fn the_right_token_passes_and_a_wrong_one_does_not() {
        assert!(exchange("the-token").unwrap().starts_with("v="));
        assert!(matches!(
            exchange("another-token"),
            Err(ScramError::WrongProof)
        ));
    }

    #[test]
    fn plus_passes_only_bound_to_this_servers_certificate() {
        let ours: &[u8] = &[7; 32];
        let flag = "p=tls-server-end-point";
        let plus =
            |secret, binds_to| bound_exchange(secret, MECHANISM_PLUS, flag, Some(ours), binds_to);
        assert!(plus("the-token", ours).unwrap().starts_with("v="));
        // A relay terminating TLS with its own certificate: the client binds to that.
        assert!(matches!(
            plus("the-token", &[8; 32]),
            Err(ScramError::ChannelBinding(_))
        ));
        assert!(matches!(
            plus("another-token", ours),
            Err(ScramError::WrongProof)
        ));
        // Without binding, on the same TLS connection, a client may still choose `n`.
        assert!(bound_exchange("the-token", MECHANISM, "n", Some(ours), b"")
            .unwrap()
            .starts_with("v="));
    }

    #[test]
    fn a_downgrade_and_mismatched_flags_are_refused() {
        let ours: &[u8] = &[7; 32];
        let tried = |mechanism, flag, end_point| {
            bound_exchange("the-token", mechanism, flag, end_point, b"")
        };
        // `y` means "I could bind, I think you cannot": false when binding was offered.
        assert!(matches!(
            tried(MECHANISM, "y", Some(ours)),
            Err(ScramError::ChannelBinding(_))
        ));
        assert!(tried(MECHANISM, "y", None).unwrap().starts_with("v="));
        // PLUS is not offered without TLS.
        assert!(matches!(
            tried(MECHANISM_PLUS, "p=tls-server-end-point", None),
            Err(ScramError::Mechanism(_))
        ));
        // PLUS with a flag that does not bind, or another binding type.
        assert!(matches!(
            tried(MECHANISM_PLUS, "n", Some(ours)),
            Err(ScramError::ChannelBinding(_))
        ));
        assert!(matches!(
            tried(MECHANISM_PLUS, "p=tls-unique", Some(ours)),
            Err(ScramError::ChannelBinding(_))
        ));
        // Binding asked for under the mechanism that does not bind.
        assert!(matches!(
            tried(MECHANISM, "p=tls-server-end-point", Some(ours)),
            Err(ScramError::ChannelBinding(_))
        ));
    }

    #[test]
    fn other_mechanisms_and_malformed_messages_are_refused() {
        let login = || ScramLogin {
            secret: crate::scram::derive("t"),
            token_sha256: String::new(),
        };
        assert!(matches!(
            client_first(login(), "SCRAM-SHA-1", b"n,,n=,r=a", None),
            Err(ScramError::Mechanism(_))
        ));
        assert!(matches!(
            client_first(login(), MECHANISM, b"n,,n=,", None),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            client_first(login(), MECHANISM, b"x,,n=,r=a", None),
            Err(ScramError::Malformed(_))
        ));
    }
}
