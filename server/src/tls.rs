//! TLS on the listener, with rustls.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A server certificate chain and its key, ready to accept TLS connections (TLS 1.2 and 1.3,
/// HTTP/1.1 by ALPN). Cheap to clone.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// Why a certificate or key cannot be used.
#[derive(Debug)]
pub struct TlsError {
    path: PathBuf,
    message: String,
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for TlsError {}

impl Tls {
    /// Reads a PEM certificate chain (the server's certificate first) and a PEM private key
    /// (PKCS #8, PKCS #1 or SEC 1).
    pub fn from_pem_files(
        certificate: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Tls, TlsError> {
        let (certificate, key) = (certificate.as_ref(), key.as_ref());
        let error = |path: &Path, message: String| TlsError {
            path: path.to_owned(),
            message,
        };
        let chain = CertificateDer::pem_file_iter(certificate)
            .map_err(|e| error(certificate, format!("cannot read the certificates: {e}")))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| error(certificate, format!("not a PEM certificate chain: {e}")))?;
        if chain.is_empty() {
            return Err(error(certificate, "holds no certificate".to_owned()));
        }
        let private_key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| error(key, format!("not a PEM private key: {e}")))?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| error(certificate, e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, private_key)
            .map_err(|e| error(key, format!("the key does not fit the certificate: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}
