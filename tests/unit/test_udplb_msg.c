/* test_udplb_msg.c - the UDP load balancer core's one table of texts (src/udplb/msg.c), word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "udplb/msg.h"

static void texts_word_for_word(void **state)
{
	(void)state;
	static const struct {
		int err;
		const char *text;
	} errs[] = {
		{UDPLB_OK, "success"},
		{UDPLB_E_BUSY, "outputs not drained: poll until empty before the next input"},
		{UDPLB_E_INVAL, "malformed input"},
		{UDPLB_E_NOMEM, "out of memory"},
		{UDPLB_E_TIMEOUT, "idle timeout must be between 1 and 86400000 ms"},
		{UDPLB_E_MAX_FLOWS, "max_flows must be between 1 and 16777216"},
		{UDPLB_E_MAX_RX, "max_rx_datagram_size must be between 1 and 65535"},
		{UDPLB_E_PREFIX, "subnet prefix length must be at most 32 for IPv4 and 128 for IPv6"},
		{UDPLB_E_SELECTION, "selection must be round_robin, hrw or maglev"},
		{UDPLB_E_AFFINITY, "affinity must be source_ip or source_ip_port"},
		{UDPLB_E_PPV2, "proxy_protocol must be none, first or every"},
		{UDPLB_E_BACKENDS, "a cluster holds at most 1024 backends"},
		{UDPLB_E_WEIGHT, "backend weight must be between 1 and 65535"},
		{UDPLB_E_BACKEND, "backend address must be an IPv4 or IPv6 address with a non-zero port"},
		{UDPLB_E_DUPLICATE, "backend address listed twice"},
		{UDPLB_E_MAGLEV, "maglev table size must be a prime, at least the backend count, at "
		                 "most 655373"},
		{UDPLB_E_RANGE, "backend index out of range"},
		{UDPLB_E_INVARIANT, "udplb core invariant broken"},
		{UDPLB_E_LINK_LOCAL, "a link-local backend address would need a zone, which backend "
		                     "addresses do not take: give a routable address"},
		{-19, "unknown error"},
		{1, "unknown error"},
	};
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
		assert_string_equal(udplb_strerror(errs[i].err), errs[i].text);

	static const char *const drops[UDPLB_DROP_COUNT][2] = {
		{"truncated", "datagram longer than max_rx_datagram_size"},
		{"no_backend", "no cluster or no backend to send to"},
		{"invalid", "empty datagram or a source that cannot be a flow"},
		{"shed_draining", "new flow refused: the listener is draining"},
		{"shed_per_ip", "new flow refused: max_flows_per_ip reached"},
		{"shed_per_subnet", "new flow refused: max_flows_per_subnet reached"},
		{"shed_max_flows", "new flow refused: max_flows reached"},
		{"no_memory", "new flow refused: out of memory"},
		{"unknown_flow", "backend datagram for a closed flow"},
	};
	for (int r = 0; r < UDPLB_DROP_COUNT; r++) {
		assert_string_equal(udplb_drop_name((udplb_drop_reason)r), drops[r][0]);
		assert_string_equal(udplb_drop_text((udplb_drop_reason)r), drops[r][1]);
		assert_int_equal(udplb_drop_is_shed((udplb_drop_reason)r),
		                 strncmp(drops[r][0], "shed_", 5) == 0);
	}
	static const char *const closes[UDPLB_CLOSE_COUNT][2] = {
		{"idle", "idle timeout"},
		{"responses", "responses cap reached"},
		{"requests", "requests cap reached"},
		{"closed", "listener removed or stopped"},
		{"aborted", "flow aborted"},
		{"removed", "its backend was removed from the cluster"},
	};
	for (int r = 0; r < UDPLB_CLOSE_COUNT; r++) {
		assert_string_equal(udplb_close_name((udplb_close_reason)r), closes[r][0]);
		assert_string_equal(udplb_close_text((udplb_close_reason)r), closes[r][1]);
	}
	assert_string_equal(udplb_drop_name((udplb_drop_reason)99), "unknown");
	assert_string_equal(udplb_close_text((udplb_close_reason)99), "unknown close reason");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(texts_word_for_word),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
