/*
 * Benchmark receiver, after Proton's receive.c and direct.c examples, which
 * decode and print every message and so would be the bottleneck.
 *
 *   receiver connect|listen HOST PORT ADDRESS COUNT
 *
 * connect: attaches to ADDRESS on a router.  listen: accepts a sender's link
 * directly, the peer-to-peer baseline (PORT 0 picks a free port).  Prints
 * "ready PORT" once messages can flow, then, when COUNT messages arrived or
 * none came for IDLE_MS (a pre-settled message may be dropped, or the path may
 * be broken), one JSON line: throughput from first to last arrival, and one-way
 * latency percentiles.
 */
#include "bench.h"

#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/listener.h>
#include <proton/netaddr.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <stdlib.h>

enum {
  CREDIT_WINDOW = 1000, /* as in receive.c; topped up at half so credit never runs dry */
  IDLE_MS = 3000,
  TICK_MS = 500,
};

typedef struct app_t {
  const char *address;
  long count;
  pn_proactor_t *proactor;
  pn_listener_t *listener;
  char buf[65536]; /* the delivery being read; a 100-byte-body message fits many times */
  size_t have;
  int64_t *latency_ns;
  long received;
  int64_t first_ns, last_ns;
  int64_t quiet_since; /* since ready or the last message; 0 before ready */
  bool done;
  int exit_code;
} app_t;

static void finish(app_t *a) {
  if (a->done) return;
  a->done = true;
  pn_proactor_cancel_timeout(a->proactor);
  if (a->listener) pn_listener_close(a->listener);
}

static void on_message(app_t *a) {
  int64_t now = mono_ns();
  body_t body;
  if (a->have < BODY_SIZE) {
    fprintf(stderr, "receiver: %zu-byte message is shorter than a body\n", a->have);
    a->exit_code = 1;
    return;
  }
  memcpy(&body, a->buf + a->have - BODY_SIZE, sizeof body);
  if (body.magic != BODY_MAGIC) {
    fprintf(stderr, "receiver: message %ld does not end in a benchmark body\n", a->received);
    a->exit_code = 1;
    return;
  }
  if (a->received == 0) a->first_ns = now;
  a->last_ns = a->quiet_since = now;
  a->latency_ns[a->received++] = now - body.sent_ns;
}

static void on_delivery(app_t *a, pn_delivery_t *d) {
  pn_link_t *l = pn_delivery_link(d);
  ssize_t n;
  if (!pn_delivery_readable(d)) return;
  while ((n = pn_link_recv(l, a->buf + a->have, sizeof a->buf - a->have)) > 0) a->have += (size_t)n;
  if (n == PN_ABORTED) {
    a->have = 0;
  } else if (pn_delivery_partial(d)) {
    if (a->have < sizeof a->buf) return; /* the rest comes in a later transfer */
    fprintf(stderr, "receiver: message larger than %zu bytes\n", sizeof a->buf);
    a->exit_code = 1;
    a->have = 0;
  } else {
    on_message(a);
    a->have = 0;
    if (!pn_delivery_settled(d)) pn_delivery_update(d, PN_ACCEPTED);
  }
  pn_delivery_settle(d);
  if (pn_link_credit(l) < CREDIT_WINDOW / 2) pn_link_flow(l, CREDIT_WINDOW - pn_link_credit(l));
  if (a->received == a->count) {
    pn_session_t *s = pn_link_session(l);
    pn_link_close(l);
    pn_session_close(s);
    pn_connection_close(pn_session_connection(s));
    finish(a);
  }
}

static bool handle(app_t *a, pn_event_t *e) {
  switch (pn_event_type(e)) {
  case PN_LISTENER_OPEN: {
    char port[PN_MAX_ADDR];
    pn_netaddr_host_port(pn_listener_addr(pn_event_listener(e)), NULL, 0, port, sizeof port);
    printf("ready %s\n", port);
    fflush(stdout);
    a->quiet_since = mono_ns();
    break;
  }
  case PN_LISTENER_ACCEPT:
    pn_listener_accept2(pn_event_listener(e), NULL, NULL);
    break;
  case PN_CONNECTION_INIT: {
    pn_connection_t *c = pn_event_connection(e);
    pn_connection_set_container(c, "bench-receiver");
    if (a->listener) break; /* the sender opens everything */
    pn_session_t *s = pn_session(c);
    pn_link_t *l = pn_receiver(s, "bench-receiver");
    pn_connection_open(c);
    pn_session_open(s);
    pn_terminus_set_address(pn_link_source(l), a->address);
    pn_link_open(l);
    pn_link_flow(l, CREDIT_WINDOW);
    break;
  }
  case PN_CONNECTION_REMOTE_OPEN:
    if (!(pn_connection_state(pn_event_connection(e)) & PN_LOCAL_ACTIVE))
      pn_connection_open(pn_event_connection(e));
    break;
  case PN_SESSION_REMOTE_OPEN:
    if (!(pn_session_state(pn_event_session(e)) & PN_LOCAL_ACTIVE))
      pn_session_open(pn_event_session(e));
    break;
  case PN_LINK_REMOTE_OPEN: {
    pn_link_t *l = pn_event_link(e);
    if (pn_link_state(l) & PN_LOCAL_ACTIVE) { /* our link to the router is attached */
      printf("ready -\n");
      fflush(stdout);
      a->quiet_since = mono_ns();
    } else if (pn_link_is_receiver(l)) { /* a sender attached to us directly */
      pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
      pn_link_open(l);
      pn_link_flow(l, CREDIT_WINDOW);
    } else {
      pn_link_close(l);
    }
    break;
  }
  case PN_DELIVERY:
    on_delivery(a, pn_event_delivery(e));
    break;
  case PN_PROACTOR_TIMEOUT:
    if (a->quiet_since && mono_ns() - a->quiet_since > (int64_t)IDLE_MS * 1000000) {
      fprintf(stderr, "receiver: nothing for %d ms after %ld messages, stopping\n", IDLE_MS,
              a->received);
      finish(a);
      pn_proactor_disconnect(a->proactor, NULL);
    } else if (!a->done) {
      pn_proactor_set_timeout(a->proactor, TICK_MS);
    }
    break;
  case PN_TRANSPORT_CLOSED:
    if (report_condition(e, pn_transport_condition(pn_event_transport(e))) && !a->done)
      a->exit_code = 1;
    finish(a); /* one connection per run: nothing more will come */
    break;
  case PN_CONNECTION_REMOTE_CLOSE:
    if (report_condition(e, pn_connection_remote_condition(pn_event_connection(e)))) a->exit_code = 1;
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_SESSION_REMOTE_CLOSE:
  case PN_LINK_REMOTE_CLOSE:
  case PN_LINK_REMOTE_DETACH:
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_PROACTOR_INACTIVE:
    return false;
  default:
    break;
  }
  return true;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* Nearest-rank percentile of the sorted latencies, in microseconds. */
static double percentile_us(const int64_t *sorted, long n, double p) {
  if (n == 0) return 0.0;
  long rank = (long)(p / 100.0 * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  return (double)sorted[rank - 1] / 1e3;
}

int main(int argc, char **argv) {
  if (argc != 6 || (strcmp(argv[1], "connect") != 0 && strcmp(argv[1], "listen") != 0)) {
    fprintf(stderr, "usage: %s connect|listen HOST PORT ADDRESS COUNT\n", argv[0]);
    return 2;
  }
  app_t *a = calloc(1, sizeof *a);
  char addr[PN_MAX_ADDR];
  a->address = argv[4];
  a->count = atol(argv[5]);
  a->latency_ns = malloc(sizeof(int64_t) * (size_t)(a->count > 0 ? a->count : 1));
  a->proactor = pn_proactor();
  pn_proactor_addr(addr, sizeof addr, argv[2], argv[3]);
  if (strcmp(argv[1], "listen") == 0) {
    a->listener = pn_listener();
    pn_proactor_listen(a->proactor, a->listener, addr, 16);
  } else {
    pn_proactor_connect2(a->proactor, NULL, NULL, addr);
  }
  pn_proactor_set_timeout(a->proactor, TICK_MS);
  for (bool running = true; running;) {
    pn_event_batch_t *events = pn_proactor_wait(a->proactor);
    for (pn_event_t *e; running && (e = pn_event_batch_next(events));) running = handle(a, e);
    pn_proactor_done(a->proactor, events);
  }
  double elapsed = a->received > 1 ? (double)(a->last_ns - a->first_ns) / 1e9 : 0.0;
  qsort(a->latency_ns, (size_t)a->received, sizeof(int64_t), cmp_i64);
  printf("{\"received\": %ld, \"elapsed_s\": %.6f, \"msgs_per_s\": %.1f, \"latency_p50_us\": %.1f, "
         "\"latency_p99_us\": %.1f, \"latency_max_us\": %.1f, \"cpu_s\": %.3f}\n",
         a->received, elapsed, elapsed > 0 ? (double)(a->received - 1) / elapsed : 0.0,
         percentile_us(a->latency_ns, a->received, 50), percentile_us(a->latency_ns, a->received, 99),
         percentile_us(a->latency_ns, a->received, 100), cpu_seconds());
  pn_proactor_free(a->proactor);
  int rc = a->exit_code;
  free(a->latency_ns);
  free(a);
  return rc;
}
