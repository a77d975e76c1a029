/* ossl.h - OpenSSL's libssl and libcrypto, opened at run time on their first use instead of linked: every file that calls OpenSSL includes this instead of <openssl/...>. */
#ifndef ETM_CRYPTO_OSSL_H
#define ETM_CRYPTO_OSSL_H

/* Why: linked, libcrypto and libssl are mapped and relocated in every
 * process, 1.7 MiB of RSS (their symbol tables, 434 KB of relocations,
 * 392 KiB of relocated data) though a config without TLS, VMess,
 * Shadowsocks or Trojan never calls them (docs/performance.md, Idle
 * memory). The build still compiles against OpenSSL's headers, so every
 * call is checked against its real prototype.
 *
 * How: each OpenSSL function this program calls is a member of one table
 * of pointers, typed with __typeof__ from the header's own declaration,
 * and a macro of the function's name turns a call into a call through the
 * table. The first use opens libssl (which brings libcrypto) with dlopen
 * and fills the table; a failure to open it ends the process with the
 * reason (the build compiled against OpenSSL 3, so a machine without its
 * libssl.so.3 is a broken install, as it would be for a linked library).
 * OpenSSL's own macros (SSL_CTX_set_options over SSL_CTX_ctrl, ...) expand
 * to names that these macros then catch.
 *
 * Adding a call: a name missing here is an undefined reference when
 * etemenanki-app links (it does not link libssl or libcrypto): add it to
 * ETM_OSSL_FUNCS and give it a #define below, in the same order. */
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define ETM_OSSL_FUNCS(X) \
	X(BIO_clear_flags) \
	X(BIO_ctrl) \
	X(BIO_ctrl_pending) \
	X(BIO_free) \
	X(BIO_get_data) \
	X(BIO_get_new_index) \
	X(BIO_meth_free) \
	X(BIO_meth_new) \
	X(BIO_meth_set_ctrl) \
	X(BIO_meth_set_read_ex) \
	X(BIO_meth_set_write_ex) \
	X(BIO_new) \
	X(BIO_new_file) \
	X(BIO_read) \
	X(BIO_s_mem) \
	X(BIO_set_data) \
	X(BIO_set_flags) \
	X(BIO_set_init) \
	X(BIO_write) \
	X(CRYPTO_memcmp) \
	X(ERR_clear_error) \
	X(ERR_peek_error) \
	X(ERR_reason_error_string) \
	X(EVP_BytesToKey) \
	X(EVP_CIPHER_CTX_ctrl) \
	X(EVP_CIPHER_CTX_free) \
	X(EVP_CIPHER_CTX_new) \
	X(EVP_CIPHER_CTX_set_padding) \
	X(EVP_CIPHER_fetch) \
	X(EVP_CIPHER_free) \
	X(EVP_CipherFinal_ex) \
	X(EVP_CipherInit_ex) \
	X(EVP_CipherUpdate) \
	X(EVP_DecodeBlock) \
	X(EVP_DecryptFinal_ex) \
	X(EVP_DecryptInit_ex) \
	X(EVP_DecryptUpdate) \
	X(EVP_Digest) \
	X(EVP_DigestFinal_ex) \
	X(EVP_DigestInit_ex) \
	X(EVP_DigestUpdate) \
	X(EVP_EncodeBlock) \
	X(EVP_EncryptFinal_ex) \
	X(EVP_EncryptInit_ex) \
	X(EVP_EncryptUpdate) \
	X(EVP_MD_CTX_free) \
	X(EVP_MD_CTX_new) \
	X(EVP_MD_fetch) \
	X(EVP_MD_free) \
	X(EVP_PKEY_free) \
	X(EVP_aes_128_ecb) \
	X(EVP_aes_128_gcm) \
	X(EVP_aes_256_ecb) \
	X(EVP_aes_256_gcm) \
	X(EVP_chacha20) \
	X(EVP_chacha20_poly1305) \
	X(EVP_md5) \
	X(EVP_sha1) \
	X(EVP_sha224) \
	X(EVP_sha256) \
	X(EVP_shake128) \
	X(OPENSSL_cleanse) \
	X(OpenSSL_version) \
	X(PEM_read_bio_PrivateKey) \
	X(RAND_bytes) \
	X(SHA1) \
	X(SSL_CTX_ctrl) \
	X(SSL_CTX_free) \
	X(SSL_CTX_get0_certificate) \
	X(SSL_CTX_get_ex_data) \
	X(SSL_CTX_load_verify_locations) \
	X(SSL_CTX_new) \
	X(SSL_CTX_sess_set_new_cb) \
	X(SSL_CTX_set_alpn_protos) \
	X(SSL_CTX_set_alpn_select_cb) \
	X(SSL_CTX_set_default_verify_paths) \
	X(SSL_CTX_set_ex_data) \
	X(SSL_CTX_set_options) \
	X(SSL_CTX_set_verify) \
	X(SSL_CTX_use_PrivateKey) \
	X(SSL_CTX_use_certificate_chain_file) \
	X(SSL_SESSION_dup) \
	X(SSL_SESSION_free) \
	X(SSL_ctrl) \
	X(SSL_do_handshake) \
	X(SSL_free) \
	X(SSL_get0_alpn_selected) \
	X(SSL_get0_param) \
	X(SSL_get_SSL_CTX) \
	X(SSL_get_error) \
	X(SSL_get_servername) \
	X(SSL_get_verify_result) \
	X(SSL_get_version) \
	X(SSL_has_pending) \
	X(SSL_new) \
	X(SSL_read_ex) \
	X(SSL_select_next_proto) \
	X(SSL_session_reused) \
	X(SSL_set1_host) \
	X(SSL_set_accept_state) \
	X(SSL_set_bio) \
	X(SSL_set_connect_state) \
	X(SSL_set_hostflags) \
	X(SSL_set_session) \
	X(SSL_shutdown) \
	X(SSL_write_ex) \
	X(TLS_client_method) \
	X(TLS_server_method) \
	X(X509_VERIFY_PARAM_set1_ip_asc) \
	X(X509_check_private_key) \
	X(X509_verify_cert_error_string)

/* The table; filled once by etm_ossl_load. */
typedef struct etm_ossl_table {
#define ETM_OSSL_MEMBER(f) __typeof__(&f) f;
	ETM_OSSL_FUNCS(ETM_OSSL_MEMBER)
#undef ETM_OSSL_MEMBER
} etm_ossl_table;

extern etm_ossl_table etm_ossl_tab;
extern atomic_bool etm_ossl_ready;

/* Opens the library and fills the table, once per process (any thread);
 * ends the process when it cannot. Returns the table. */
const etm_ossl_table *etm_ossl_load(void);

/* Opens soname and resolves every name into *t without touching the
 * process's table: 0, or -1 with the reason in err. etm_ossl_load's
 * worker, and what the tests call with a name that does not exist. */
int etm_ossl_open(const char *soname, etm_ossl_table *t, char *err, size_t err_size);

/* The library etm_ossl_load opens: ETM_LIBSSL_SONAME (libssl.so.3). A
 * test sets another before the first call to see the refusal. */
extern const char *etm_ossl_soname;

/* Whether OpenSSL has been opened in this process (for tests and the
 * memory docs: a config without TLS or ciphers never opens it). */
bool etm_ossl_loaded(void);

static inline const etm_ossl_table *etm_ossl(void)
{
	if (__builtin_expect(atomic_load_explicit(&etm_ossl_ready, memory_order_acquire), 1))
		return &etm_ossl_tab;
	return etm_ossl_load();
}

#ifndef ETM_OSSL_NO_MACROS
#define BIO_clear_flags (etm_ossl()->BIO_clear_flags)
#define BIO_ctrl (etm_ossl()->BIO_ctrl)
#define BIO_ctrl_pending (etm_ossl()->BIO_ctrl_pending)
#define BIO_free (etm_ossl()->BIO_free)
#define BIO_get_data (etm_ossl()->BIO_get_data)
#define BIO_get_new_index (etm_ossl()->BIO_get_new_index)
#define BIO_meth_free (etm_ossl()->BIO_meth_free)
#define BIO_meth_new (etm_ossl()->BIO_meth_new)
#define BIO_meth_set_ctrl (etm_ossl()->BIO_meth_set_ctrl)
#define BIO_meth_set_read_ex (etm_ossl()->BIO_meth_set_read_ex)
#define BIO_meth_set_write_ex (etm_ossl()->BIO_meth_set_write_ex)
#define BIO_new (etm_ossl()->BIO_new)
#define BIO_new_file (etm_ossl()->BIO_new_file)
#define BIO_read (etm_ossl()->BIO_read)
#define BIO_s_mem (etm_ossl()->BIO_s_mem)
#define BIO_set_data (etm_ossl()->BIO_set_data)
#define BIO_set_flags (etm_ossl()->BIO_set_flags)
#define BIO_set_init (etm_ossl()->BIO_set_init)
#define BIO_write (etm_ossl()->BIO_write)
#define CRYPTO_memcmp (etm_ossl()->CRYPTO_memcmp)
#define ERR_clear_error (etm_ossl()->ERR_clear_error)
#define ERR_peek_error (etm_ossl()->ERR_peek_error)
#define ERR_reason_error_string (etm_ossl()->ERR_reason_error_string)
#define EVP_BytesToKey (etm_ossl()->EVP_BytesToKey)
#define EVP_CIPHER_CTX_ctrl (etm_ossl()->EVP_CIPHER_CTX_ctrl)
#define EVP_CIPHER_CTX_free (etm_ossl()->EVP_CIPHER_CTX_free)
#define EVP_CIPHER_CTX_new (etm_ossl()->EVP_CIPHER_CTX_new)
#define EVP_CIPHER_CTX_set_padding (etm_ossl()->EVP_CIPHER_CTX_set_padding)
#define EVP_CIPHER_fetch (etm_ossl()->EVP_CIPHER_fetch)
#define EVP_CIPHER_free (etm_ossl()->EVP_CIPHER_free)
#define EVP_CipherFinal_ex (etm_ossl()->EVP_CipherFinal_ex)
#define EVP_CipherInit_ex (etm_ossl()->EVP_CipherInit_ex)
#define EVP_CipherUpdate (etm_ossl()->EVP_CipherUpdate)
#define EVP_DecodeBlock (etm_ossl()->EVP_DecodeBlock)
#define EVP_DecryptFinal_ex (etm_ossl()->EVP_DecryptFinal_ex)
#define EVP_DecryptInit_ex (etm_ossl()->EVP_DecryptInit_ex)
#define EVP_DecryptUpdate (etm_ossl()->EVP_DecryptUpdate)
#define EVP_Digest (etm_ossl()->EVP_Digest)
#define EVP_DigestFinal_ex (etm_ossl()->EVP_DigestFinal_ex)
#define EVP_DigestInit_ex (etm_ossl()->EVP_DigestInit_ex)
#define EVP_DigestUpdate (etm_ossl()->EVP_DigestUpdate)
#define EVP_EncodeBlock (etm_ossl()->EVP_EncodeBlock)
#define EVP_EncryptFinal_ex (etm_ossl()->EVP_EncryptFinal_ex)
#define EVP_EncryptInit_ex (etm_ossl()->EVP_EncryptInit_ex)
#define EVP_EncryptUpdate (etm_ossl()->EVP_EncryptUpdate)
#define EVP_MD_CTX_free (etm_ossl()->EVP_MD_CTX_free)
#define EVP_MD_CTX_new (etm_ossl()->EVP_MD_CTX_new)
#define EVP_MD_fetch (etm_ossl()->EVP_MD_fetch)
#define EVP_MD_free (etm_ossl()->EVP_MD_free)
#define EVP_PKEY_free (etm_ossl()->EVP_PKEY_free)
#define EVP_aes_128_ecb (etm_ossl()->EVP_aes_128_ecb)
#define EVP_aes_128_gcm (etm_ossl()->EVP_aes_128_gcm)
#define EVP_aes_256_ecb (etm_ossl()->EVP_aes_256_ecb)
#define EVP_aes_256_gcm (etm_ossl()->EVP_aes_256_gcm)
#define EVP_chacha20 (etm_ossl()->EVP_chacha20)
#define EVP_chacha20_poly1305 (etm_ossl()->EVP_chacha20_poly1305)
#define EVP_md5 (etm_ossl()->EVP_md5)
#define EVP_sha1 (etm_ossl()->EVP_sha1)
#define EVP_sha224 (etm_ossl()->EVP_sha224)
#define EVP_sha256 (etm_ossl()->EVP_sha256)
#define EVP_shake128 (etm_ossl()->EVP_shake128)
#define OPENSSL_cleanse (etm_ossl()->OPENSSL_cleanse)
#define OpenSSL_version (etm_ossl()->OpenSSL_version)
#define PEM_read_bio_PrivateKey (etm_ossl()->PEM_read_bio_PrivateKey)
#define RAND_bytes (etm_ossl()->RAND_bytes)
#define SHA1 (etm_ossl()->SHA1)
#define SSL_CTX_ctrl (etm_ossl()->SSL_CTX_ctrl)
#define SSL_CTX_free (etm_ossl()->SSL_CTX_free)
#define SSL_CTX_get0_certificate (etm_ossl()->SSL_CTX_get0_certificate)
#define SSL_CTX_get_ex_data (etm_ossl()->SSL_CTX_get_ex_data)
#define SSL_CTX_load_verify_locations (etm_ossl()->SSL_CTX_load_verify_locations)
#define SSL_CTX_new (etm_ossl()->SSL_CTX_new)
#define SSL_CTX_sess_set_new_cb (etm_ossl()->SSL_CTX_sess_set_new_cb)
#define SSL_CTX_set_alpn_protos (etm_ossl()->SSL_CTX_set_alpn_protos)
#define SSL_CTX_set_alpn_select_cb (etm_ossl()->SSL_CTX_set_alpn_select_cb)
#define SSL_CTX_set_default_verify_paths (etm_ossl()->SSL_CTX_set_default_verify_paths)
#define SSL_CTX_set_ex_data (etm_ossl()->SSL_CTX_set_ex_data)
#define SSL_CTX_set_options (etm_ossl()->SSL_CTX_set_options)
#define SSL_CTX_set_verify (etm_ossl()->SSL_CTX_set_verify)
#define SSL_CTX_use_PrivateKey (etm_ossl()->SSL_CTX_use_PrivateKey)
#define SSL_CTX_use_certificate_chain_file (etm_ossl()->SSL_CTX_use_certificate_chain_file)
#define SSL_SESSION_dup (etm_ossl()->SSL_SESSION_dup)
#define SSL_SESSION_free (etm_ossl()->SSL_SESSION_free)
#define SSL_ctrl (etm_ossl()->SSL_ctrl)
#define SSL_do_handshake (etm_ossl()->SSL_do_handshake)
#define SSL_free (etm_ossl()->SSL_free)
#define SSL_get0_alpn_selected (etm_ossl()->SSL_get0_alpn_selected)
#define SSL_get0_param (etm_ossl()->SSL_get0_param)
#define SSL_get_SSL_CTX (etm_ossl()->SSL_get_SSL_CTX)
#define SSL_get_error (etm_ossl()->SSL_get_error)
#define SSL_get_servername (etm_ossl()->SSL_get_servername)
#define SSL_get_verify_result (etm_ossl()->SSL_get_verify_result)
#define SSL_get_version (etm_ossl()->SSL_get_version)
#define SSL_has_pending (etm_ossl()->SSL_has_pending)
#define SSL_new (etm_ossl()->SSL_new)
#define SSL_read_ex (etm_ossl()->SSL_read_ex)
#define SSL_select_next_proto (etm_ossl()->SSL_select_next_proto)
#define SSL_session_reused (etm_ossl()->SSL_session_reused)
#define SSL_set1_host (etm_ossl()->SSL_set1_host)
#define SSL_set_accept_state (etm_ossl()->SSL_set_accept_state)
#define SSL_set_bio (etm_ossl()->SSL_set_bio)
#define SSL_set_connect_state (etm_ossl()->SSL_set_connect_state)
#define SSL_set_hostflags (etm_ossl()->SSL_set_hostflags)
#define SSL_set_session (etm_ossl()->SSL_set_session)
#define SSL_shutdown (etm_ossl()->SSL_shutdown)
#define SSL_write_ex (etm_ossl()->SSL_write_ex)
#define TLS_client_method (etm_ossl()->TLS_client_method)
#define TLS_server_method (etm_ossl()->TLS_server_method)
#define X509_VERIFY_PARAM_set1_ip_asc (etm_ossl()->X509_VERIFY_PARAM_set1_ip_asc)
#define X509_check_private_key (etm_ossl()->X509_check_private_key)
#define X509_verify_cert_error_string (etm_ossl()->X509_verify_cert_error_string)
#endif

#endif
