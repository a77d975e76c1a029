/* test_ossl.c - OpenSSL opened at run time: the table fills from the real library, a missing library is refused with its text, and the process's table is filled on the first call through it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"

#include "crypto/ossl.h"

static void a_missing_library_is_refused_with_its_name(void **state)
{
	(void)state;
	etm_ossl_table t;
	char err[512];
	assert_int_equal(etm_ossl_open("libetm-no-such-ssl.so.9", &t, err, sizeof err), -1);
	const char *want = "cannot load libetm-no-such-ssl.so.9: ";
	assert_memory_equal(err, want, strlen(want));
	/* the loader's reason follows (dlerror's words) */
	assert_non_null(strstr(err, "libetm-no-such-ssl.so.9: cannot open shared object file"));
}

static void a_library_without_a_name_is_refused_with_the_name(void **state)
{
	(void)state;
	/* libc opens, but has none of OpenSSL's functions */
	etm_ossl_table t;
	char err[512];
	assert_int_equal(etm_ossl_open("libc.so.6", &t, err, sizeof err), -1);
	const char *want = "libc.so.6 has no BIO_clear_flags: "; /* the table's first name */
	assert_memory_equal(err, want, strlen(want));
}

/* The process's first call without the library: the reason in the log,
 * and the process ends with status 1 (in a child, which has the table
 * still empty). */
static void a_first_call_without_the_library_ends_the_process_with_the_reason(void **state)
{
	(void)state;
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fd[0]);
		log_set_stream(fdopen(fd[1], "w"));
		etm_ossl_soname = "libetm-no-such-ssl.so.9";
		uint8_t d[SHA_DIGEST_LENGTH];
		SHA1((const uint8_t *)"abc", 3, d);
		_exit(0); /* not reached: the call above ends the process */
	}
	close(fd[1]);
	char got[1024] = "";
	size_t n = 0;
	ssize_t k;
	while (n < sizeof got - 1 && (k = read(fd[0], got + n, sizeof got - 1 - n)) > 0)
		n += (size_t)k;
	close(fd[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	const char *want = "crypto: OpenSSL is needed and cannot be loaded: cannot load "
	                   "libetm-no-such-ssl.so.9: ";
	assert_non_null(strstr(got, want));
}

static void the_real_library_fills_every_entry(void **state)
{
	(void)state;
	etm_ossl_table t;
	memset(&t, 0, sizeof t);
	char err[512] = "";
	assert_int_equal(etm_ossl_open(ETM_LIBSSL_SONAME, &t, err, sizeof err), 0);
	void *const *p = (void *const *)&t;
	for (size_t i = 0; i < sizeof t / sizeof(void *); i++)
		assert_non_null(p[i]);
}

static void the_first_call_fills_the_process_table(void **state)
{
	(void)state;
	assert_false(etm_ossl_loaded());
	uint8_t d[SHA_DIGEST_LENGTH];
	/* SHA-1("abc"), FIPS 180-2 appendix A */
	static const uint8_t want[SHA_DIGEST_LENGTH] = {0xa9, 0x99, 0x3e, 0x36, 0x47, 0x06, 0x81,
	                                                0x6a, 0xba, 0x3e, 0x25, 0x71, 0x78, 0x50,
	                                                0xc2, 0x6c, 0x9c, 0xd0, 0xd8, 0x9d};
	SHA1((const uint8_t *)"abc", 3, d);
	assert_true(etm_ossl_loaded());
	assert_memory_equal(d, want, sizeof want);
	/* through the process's table: OpenSSL 3, as built against */
	assert_non_null(strstr(OpenSSL_version(OPENSSL_VERSION), "OpenSSL 3."));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_missing_library_is_refused_with_its_name),
		cmocka_unit_test(a_library_without_a_name_is_refused_with_the_name),
		cmocka_unit_test(a_first_call_without_the_library_ends_the_process_with_the_reason),
		cmocka_unit_test(the_real_library_fills_every_entry),
		cmocka_unit_test(the_first_call_fills_the_process_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
