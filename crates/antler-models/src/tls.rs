//! One TLS client configuration for the process's HTTP clients, with the platform's root
//! certificates loaded on the first TLS handshake instead of whenever a client is built.
//!
//! reqwest's default (rustls with the platform verifier) reads and parses every root in
//! `/etc/ssl/certs` each time a `Client` is built — a start-up builds one per configured model
//! and one for MCP, and a run against a plain-`http://` local model never needs them at all.
//! The verification itself is the platform verifier's, unchanged; only when its roots load moves.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// The platform verifier, built (roots loaded) at its first use.
#[derive(Debug)]
struct LazyPlatformVerifier {
    provider: Arc<CryptoProvider>,
    inner: OnceLock<Result<Verifier, rustls::Error>>,
}

impl LazyPlatformVerifier {
    fn get(&self) -> Result<&Verifier, rustls::Error> {
        self.inner
            .get_or_init(|| Verifier::new(self.provider.clone()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl ServerCertVerifier for LazyPlatformVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.get()?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        // Asked when a handshake starts; the provider answers it without any roots.
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// reqwest's own rustls settings (its default provider, TLS 1.2 and 1.3, SNI, HTTP/1.1 ALPN —
/// the workspace builds reqwest without HTTP/2) around the lazy verifier. `None` if rustls
/// refuses the protocol versions (it does not with its own provider).
fn shared_config() -> Option<&'static rustls::ClientConfig> {
    static CONFIG: OnceLock<Option<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = CryptoProvider::get_default()
                .cloned()
                .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
            let verifier = Arc::new(LazyPlatformVerifier {
                provider: provider.clone(),
                inner: OnceLock::new(),
            });
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .ok()?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(config)
        })
        .as_ref()
}

/// A `reqwest::ClientBuilder` on the process's shared TLS configuration: building the client
/// reads no certificate; the first `https://` handshake of the process loads the roots once.
pub fn client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match shared_config() {
        Some(config) => builder.tls_backend_preconfigured(config.clone()),
        None => builder,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn verifier() -> LazyPlatformVerifier {
        LazyPlatformVerifier {
            provider: Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
            inner: OnceLock::new(),
        }
    }

    #[test]
    fn a_client_builds_on_the_shared_config() {
        assert!(shared_config().is_some());
        client_builder().build().unwrap();
    }

    #[test]
    fn starting_a_handshake_loads_no_roots() {
        let v = verifier();
        assert!(!v.supported_verify_schemes().is_empty());
        assert!(
            v.inner.get().is_none(),
            "roots loaded before any certificate was verified"
        );
    }

    #[test]
    fn certificates_are_still_verified() {
        let v = verifier();
        let bogus = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        let name = ServerName::try_from("example.com").unwrap();
        assert!(v
            .verify_server_cert(&bogus, &[], &name, &[], UnixTime::now())
            .is_err());
        assert!(
            v.inner.get().is_some(),
            "the platform verifier was not consulted"
        );
    }
}
