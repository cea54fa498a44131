/*
 * Benchmark receiver, after Proton's receive.c and direct.c examples, which
 * decode and print every message and so would be the bottleneck.
 *
 *   receiver connect|listen HOST PORT ADDRESS COUNT [TRACE]
 *
 * connect: attaches to ADDRESS on a router.  listen: accepts a sender's link
 * directly, the peer-to-peer baseline (PORT 0 picks a free port).  Prints
 * "ready PORT" once messages can flow, then, when COUNT messages arrived, or
 * none came for IDLE_MS (a pre-settled message may be dropped, or the path may
 * be broken), or SIGTERM/SIGINT asked it to stop, one JSON line: throughput
 * from first to last arrival, one-way latency percentiles, and the
 * CLOCK_MONOTONIC times (ns) of its attach request, of the peer's attach, and
 * of the first and last arrivals, for the network benchmark's convergence
 * timings.  With TRACE, it also writes one line per message to that file:
 * "SEQ SENT_NS RECEIVED_NS", in arrival order.  BENCH_RECEIVER_IDLE_MS in the
 * environment replaces IDLE_MS; 0 never stops for quiet (then stop it with
 * SIGTERM).
 */
#include "bench.h"

#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/listener.h>
#include <proton/netaddr.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>

enum {
  CREDIT_WINDOW = 1000, /* as in receive.c; topped up at half so credit never runs dry */
  IDLE_MS = 3000,
  TICK_MS = 500,
};

typedef struct app_t {
  const char *address;
  long count;
  int64_t idle_ns;    /* stop after this long without a message; 0: never */
  pn_proactor_t *proactor;
  pn_listener_t *listener;
  char buf[65536]; /* the delivery being read; a 100-byte-body message fits many times */
  size_t have;
  int64_t *latency_ns;
  int64_t *trace;     /* with TRACE: seq, sent_ns, received_ns per message; else NULL */
  long received;
  int64_t attach_ns;  /* our attach request went out (connect mode) */
  int64_t ready_ns;   /* the peer's attach arrived: messages can flow */
  int64_t first_ns, last_ns;
  int64_t quiet_since; /* since ready or the last message; 0 before ready */
  bool done;
  int exit_code;
} app_t;

/* The proactor SIGTERM/SIGINT interrupt; pn_proactor_interrupt is the one
 * async-signal-safe proactor call. */
static pn_proactor_t *volatile stop_proactor;

static void on_stop_signal(int sig) {
  (void)sig;
  if (stop_proactor) pn_proactor_interrupt(stop_proactor);
}

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
  if (a->trace) {
    int64_t *t = a->trace + 3 * a->received;
    t[0] = (int64_t)body.seq;
    t[1] = body.sent_ns;
    t[2] = now;
  }
  a->latency_ns[a->received++] = now - body.sent_ns;
}

static void on_delivery(app_t *a, pn_delivery_t *d) {
  pn_link_t *l = pn_delivery_link(d);
  ssize_t n;
  if (!pn_delivery_readable(d)) return;
  if (a->received == a->count) {
    /* Past COUNT (a router may have had credit for more): not ours to take. */
    if (!pn_delivery_partial(d)) {
      if (!pn_delivery_settled(d)) pn_delivery_update(d, PN_RELEASED);
      pn_delivery_settle(d);
    }
    return;
  }
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
    a->attach_ns = mono_ns();
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
      a->ready_ns = a->quiet_since = mono_ns();
      printf("ready -\n");
      fflush(stdout);
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
  case PN_PROACTOR_INTERRUPT: /* SIGTERM or SIGINT: stop and report what arrived */
    finish(a);
    pn_proactor_disconnect(a->proactor, NULL);
    break;
  case PN_PROACTOR_TIMEOUT:
    if (a->idle_ns && a->quiet_since && mono_ns() - a->quiet_since > a->idle_ns) {
      fprintf(stderr, "receiver: nothing for %.0f ms after %ld messages, stopping\n",
              (double)a->idle_ns / 1e6, a->received);
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
  if ((argc != 6 && argc != 7) ||
      (strcmp(argv[1], "connect") != 0 && strcmp(argv[1], "listen") != 0)) {
    fprintf(stderr, "usage: %s connect|listen HOST PORT ADDRESS COUNT [TRACE]\n", argv[0]);
    return 2;
  }
  app_t *a = calloc(1, sizeof *a);
  char addr[PN_MAX_ADDR];
  a->address = argv[4];
  a->count = atol(argv[5]);
  const char *idle = getenv("BENCH_RECEIVER_IDLE_MS");
  a->idle_ns = (idle ? atol(idle) : IDLE_MS) * (int64_t)1000000;
  a->latency_ns = malloc(sizeof(int64_t) * (size_t)(a->count > 0 ? a->count : 1));
  if (argc == 7) a->trace = malloc(3 * sizeof(int64_t) * (size_t)(a->count > 0 ? a->count : 1));
  a->proactor = pn_proactor();
  stop_proactor = a->proactor;
  signal(SIGTERM, on_stop_signal);
  signal(SIGINT, on_stop_signal);
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
  /* Done: a late stop signal must neither touch the proactor nor cut the report short. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  stop_proactor = NULL;
  if (a->trace) {
    FILE *f = fopen(argv[6], "w");
    for (long i = 0; f && i < a->received; i++) {
      const int64_t *t = a->trace + 3 * i;
      fprintf(f, "%" PRId64 " %" PRId64 " %" PRId64 "\n", t[0], t[1], t[2]);
    }
    if (!f || fclose(f) != 0) {
      fprintf(stderr, "receiver: cannot write %s\n", argv[6]);
      a->exit_code = 1;
    }
  }
  double elapsed = a->received > 1 ? (double)(a->last_ns - a->first_ns) / 1e9 : 0.0;
  qsort(a->latency_ns, (size_t)a->received, sizeof(int64_t), cmp_i64);
  printf("{\"received\": %ld, \"elapsed_s\": %.6f, \"msgs_per_s\": %.1f, \"latency_p50_us\": %.1f, "
         "\"latency_p99_us\": %.1f, \"latency_max_us\": %.1f, \"cpu_s\": %.3f, "
         "\"attach_ns\": %" PRId64 ", \"ready_ns\": %" PRId64 ", \"first_ns\": %" PRId64
         ", \"last_ns\": %" PRId64 "}\n",
         a->received, elapsed, elapsed > 0 ? (double)(a->received - 1) / elapsed : 0.0,
         percentile_us(a->latency_ns, a->received, 50), percentile_us(a->latency_ns, a->received, 99),
         percentile_us(a->latency_ns, a->received, 100), cpu_seconds(), a->attach_ns, a->ready_ns,
         a->first_ns, a->last_ns);
  fflush(stdout);
  pn_proactor_free(a->proactor);
  int rc = a->exit_code;
  free(a->latency_ns);
  free(a->trace);
  free(a);
  return rc;
}
