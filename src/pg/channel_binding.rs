//! The `tls-server-end-point` channel binding (RFC 5929 §4.1) that SCRAM-SHA-256-PLUS
//! binds a login to: a hash of the certificate the door presents.
//!
//! A client that signs this value proves that the TLS session it authenticated over
//! ends at the holder of this certificate, so a man in the middle who terminates TLS
//! with another certificate cannot relay the exchange. The hash is the certificate's
//! own signature hash, SHA-256 when that is MD5 or SHA-1; a certificate whose
//! signature has no single hash (Ed25519, RSA-PSS) has no end-point value, as in
//! PostgreSQL, and the door then offers SCRAM-SHA-256 alone.

use ring::digest;
use rustls_pki_types::CertificateDer;
use x509_certificate::{SignatureAlgorithm, X509Certificate};

/// The end-point value of `leaf` (the first certificate of the door's chain), or why
/// the certificate has none.
pub fn end_point_hash(leaf: &CertificateDer<'_>) -> Result<Vec<u8>, String> {
    let parsed = X509Certificate::from_der(leaf.as_ref())
        .map_err(|e| format!("the certificate does not parse: {e}"))?;
    let algorithm = match parsed.signature_algorithm() {
        Some(SignatureAlgorithm::RsaSha1)
        | Some(SignatureAlgorithm::RsaSha256)
        | Some(SignatureAlgorithm::EcdsaSha256) => &digest::SHA256,
        Some(SignatureAlgorithm::RsaSha384) | Some(SignatureAlgorithm::EcdsaSha384) => {
            &digest::SHA384
        }
        Some(SignatureAlgorithm::RsaSha512) => &digest::SHA512,
        other => {
            return Err(format!(
                "its signature algorithm ({other:?}) defines no tls-server-end-point hash"
            ))
        }
    };
    Ok(digest::digest(algorithm, leaf.as_ref()).as_ref().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `localhost` signed with `algorithm`.
    fn self_signed(algorithm: &'static rcgen::SignatureAlgorithm) -> rcgen::Certificate {
        let key = rcgen::KeyPair::generate_for(algorithm).unwrap();
        rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
    }

    #[test]
    fn an_ecdsa_p256_certificate_binds_to_the_sha256_of_its_der() {
        let cert = self_signed(&rcgen::PKCS_ECDSA_P256_SHA256);
        let der = cert.der();
        let expected = digest::digest(&digest::SHA256, der.as_ref());
        assert_eq!(end_point_hash(der).unwrap(), expected.as_ref());
    }

    #[test]
    fn an_ecdsa_p384_certificate_binds_to_sha384_and_ed25519_to_nothing() {
        let cert = self_signed(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(end_point_hash(cert.der()).unwrap().len(), 48);
        let cert = self_signed(&rcgen::PKCS_ED25519);
        assert!(end_point_hash(cert.der()).is_err());
        assert!(end_point_hash(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])).is_err());
    }
}
