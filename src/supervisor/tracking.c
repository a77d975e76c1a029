/* tracking.c - the engine's view of the flow tracker: snapshots, kills and usage gathered from every worker. */
#include <stdlib.h>

#include "etemenanki/supervisor.h"

void etm_flow_list_free(etm_flow_list *l)
{
	free(l->v);
	*l = (etm_flow_list){0};
}

void etm_usage_list_free(etm_usage_list *l)
{
	free(l->v);
	*l = (etm_usage_list){0};
}

/* Not yet wired to the workers: everything is empty. */
int etm_supervisor_flows(etm_supervisor *s, int closed, etm_flow_list *out)
{
	(void)s, (void)closed;
	*out = (etm_flow_list){0};
	return 0;
}

void etm_supervisor_traffic(etm_supervisor *s, uint64_t *up, uint64_t *down)
{
	(void)s;
	*up = *down = 0;
}

int etm_supervisor_kill(etm_supervisor *s, uint64_t id)
{
	(void)s, (void)id;
	return -1;
}

size_t etm_supervisor_kill_where(etm_supervisor *s, const etm_flow_filter *f)
{
	(void)s, (void)f;
	return 0;
}

int etm_supervisor_usage(etm_supervisor *s, etm_usage_by by, etm_usage_list *out)
{
	(void)s, (void)by;
	*out = (etm_usage_list){0};
	return 0;
}
