/*
 * Benchmark sender, after Proton's send.c example, which can neither send
 * pre-settled, nor hold a fixed rate, nor send a fixed-size body.
 *
 *   sender HOST PORT ADDRESS COUNT RATE unsettled|presettled [durable]
 *
 * Sends COUNT messages with a 100-byte body to ADDRESS.  RATE is messages per
 * second; 0 sends as fast as credit allows.  Unsettled messages count as done
 * when the peer settles them; pre-settled ones when written.  With "durable"
 * every message has a header with durable set (for a queue that stores it).
 * Prints one JSON line of counts at exit, with the CLOCK_MONOTONIC time (ns)
 * of the first credit, when sending started.
 *
 * A paced sender sends what has fallen due every TICK_US.  The proactor's own
 * timer counts whole milliseconds, and a millisecond's worth of messages sent
 * at once queues behind itself for up to half a millisecond at half load, which
 * would swamp the latency being measured; so a thread ticks instead, waking the
 * connection with pn_connection_wake, which any thread may call.  Ticking is
 * not free (about a quarter of a core here at 200 us), which is why it is not
 * finer; unpaced runs do not tick at all.
 */
#include "bench.h"

#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

enum { TICK_US = 200 };

typedef struct app_t {
  const char *address;
  long count;
  double rate;
  bool presettled;
  bool durable;
  pn_proactor_t *proactor;
  pn_connection_t *connection;
  char *msg;          /* the encoded message; its body is the last BODY_SIZE bytes */
  size_t msg_size;
  long sent, accepted, not_accepted;
  int64_t start_ns;   /* when the first credit arrived: the rate's time zero */
  pthread_t ticker;
  atomic_bool ticking;
  pthread_mutex_t lock; /* keeps the ticker off `connection` once the proactor frees it */
  int exit_code;
} app_t;

/* Encodes the message once; each send only rewrites the body's stamp. */
static void encode_template(app_t *a) {
  pn_message_t *m = pn_message();
  char body[BODY_SIZE] = {0};
  body_t head = {.magic = BODY_MAGIC};
  memcpy(body, &head, sizeof head);
  pn_message_set_inferred(m, true); /* a binary body becomes a Data section */
  pn_message_set_durable(m, a->durable); /* a header section, before the body */
  pn_data_put_binary(pn_message_body(m), pn_bytes(BODY_SIZE, body));
  a->msg_size = 1024;
  a->msg = malloc(a->msg_size);
  if (pn_message_encode(m, a->msg, &a->msg_size) != 0 ||
      memcmp(a->msg + a->msg_size - BODY_SIZE, body, BODY_SIZE) != 0) {
    fprintf(stderr, "sender: cannot encode the message template\n");
    exit(2);
  }
  pn_message_free(m);
}

static void send_one(app_t *a, pn_link_t *l) {
  char *body = a->msg + a->msg_size - BODY_SIZE; /* not aligned: write with memcpy */
  uint64_t seq = (uint64_t)a->sent;
  int64_t now = mono_ns();
  memcpy(body + offsetof(body_t, seq), &seq, sizeof seq);
  memcpy(body + offsetof(body_t, sent_ns), &now, sizeof now);
  pn_delivery_t *d = pn_delivery(l, pn_dtag((const char *)&seq, sizeof seq));
  pn_link_send(l, a->msg, a->msg_size);
  pn_link_advance(l);
  if (a->presettled) pn_delivery_settle(d);
  a->sent++;
}

static bool all_done(const app_t *a) {
  long done = a->presettled ? a->sent : a->accepted + a->not_accepted;
  return done == a->count;
}

/* Sends what credit and, when paced, the schedule allow. */
static void pump(app_t *a, pn_link_t *l) {
  if (a->start_ns == 0) {
    if (pn_link_credit(l) <= 0) return;
    a->start_ns = mono_ns();
  }
  long due = a->count;
  if (a->rate > 0) {
    long on_schedule = (long)((double)(mono_ns() - a->start_ns) * a->rate / 1e9) + 1;
    if (on_schedule < due) due = on_schedule;
  }
  while (a->sent < due && pn_link_credit(l) > 0) send_one(a, l);
  if (a->sent == a->count) atomic_store(&a->ticking, false);
  if (a->presettled && all_done(a)) pn_connection_close(a->connection);
}

static void *tick(void *arg) {
  app_t *a = arg;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  while (atomic_load(&a->ticking)) {
    next.tv_nsec += TICK_US * 1000;
    if (next.tv_nsec >= 1000000000) {
      next.tv_sec++;
      next.tv_nsec -= 1000000000;
    }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    pthread_mutex_lock(&a->lock);
    if (a->connection) pn_connection_wake(a->connection);
    pthread_mutex_unlock(&a->lock);
  }
  return NULL;
}

static bool handle(app_t *a, pn_event_t *e) {
  switch (pn_event_type(e)) {
  case PN_CONNECTION_INIT: {
    pn_connection_t *c = pn_event_connection(e);
    pn_session_t *s = pn_session(c);
    pn_link_t *l = pn_sender(s, "bench-sender");
    pthread_mutex_lock(&a->lock);
    a->connection = c;
    pthread_mutex_unlock(&a->lock);
    pn_connection_set_container(c, "bench-sender");
    pn_connection_open(c);
    pn_session_open(s);
    pn_terminus_set_address(pn_link_target(l), a->address);
    if (a->presettled) pn_link_set_snd_settle_mode(l, PN_SND_SETTLED);
    pn_link_open(l);
    break;
  }
  case PN_LINK_FLOW:
    if (pn_link_is_sender(pn_event_link(e))) pump(a, pn_event_link(e));
    break;
  case PN_CONNECTION_WAKE: {
    pn_link_t *l = pn_link_head(pn_event_connection(e), PN_LOCAL_ACTIVE);
    if (l) pump(a, l);
    break;
  }
  case PN_DELIVERY: {
    pn_delivery_t *d = pn_event_delivery(e);
    uint64_t state = pn_delivery_remote_state(d);
    if (state == 0 && !pn_delivery_settled(d)) break; /* no outcome yet */
    if (state == PN_ACCEPTED) a->accepted++;
    else a->not_accepted++;
    pn_delivery_settle(d);
    if (all_done(a)) pn_connection_close(a->connection);
    break;
  }
  case PN_TRANSPORT_CLOSED:
    if (report_condition(e, pn_transport_condition(pn_event_transport(e)))) a->exit_code = 1;
    pthread_mutex_lock(&a->lock);
    a->connection = NULL;
    pthread_mutex_unlock(&a->lock);
    break;
  case PN_CONNECTION_REMOTE_CLOSE:
    if (report_condition(e, pn_connection_remote_condition(pn_event_connection(e)))) a->exit_code = 1;
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_LINK_REMOTE_CLOSE:
  case PN_LINK_REMOTE_DETACH:
    if (report_condition(e, pn_link_remote_condition(pn_event_link(e)))) a->exit_code = 1;
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_PROACTOR_INACTIVE:
    return false;
  default:
    break;
  }
  return true;
}

int main(int argc, char **argv) {
  if (argc != 7 && !(argc == 8 && strcmp(argv[7], "durable") == 0)) {
    fprintf(stderr, "usage: %s HOST PORT ADDRESS COUNT RATE unsettled|presettled [durable]\n",
            argv[0]);
    return 2;
  }
  app_t a = {.address = argv[3], .count = atol(argv[4]), .rate = atof(argv[5]),
             .presettled = strcmp(argv[6], "presettled") == 0, .durable = argc == 8};
  char addr[PN_MAX_ADDR];
  encode_template(&a);
  pthread_mutex_init(&a.lock, NULL);
  a.proactor = pn_proactor();
  pn_proactor_addr(addr, sizeof addr, argv[1], argv[2]);
  pn_proactor_connect2(a.proactor, NULL, NULL, addr);
  atomic_init(&a.ticking, a.rate > 0);
  if (a.rate > 0) pthread_create(&a.ticker, NULL, tick, &a);
  for (bool running = true; running;) {
    pn_event_batch_t *events = pn_proactor_wait(a.proactor);
    for (pn_event_t *e; running && (e = pn_event_batch_next(events));) running = handle(&a, e);
    pn_proactor_done(a.proactor, events);
  }
  double elapsed = a.start_ns ? (double)(mono_ns() - a.start_ns) / 1e9 : 0.0;
  printf("{\"sent\": %ld, \"accepted\": %ld, \"not_accepted\": %ld, \"elapsed_s\": %.6f, "
         "\"cpu_s\": %.3f, \"start_ns\": %" PRId64 "}\n",
         a.sent, a.accepted, a.not_accepted, elapsed, cpu_seconds(), a.start_ns);
  if (a.rate > 0) {
    atomic_store(&a.ticking, false);
    pthread_join(a.ticker, NULL);
  }
  pn_proactor_free(a.proactor);
  free(a.msg);
  if (!all_done(&a)) a.exit_code = 1;
  return a.exit_code;
}
