/*
 * One large message, put on the link whole, as a Proton C application sends
 * it: pn_message_send encodes the message into one buffer and hands all of it
 * to pn_link_send at once, then the sender waits for the outcome.  The bench's
 * other large-message clients stream (bench/large.py) or use python-qpid-proton
 * (bench/whole.py); this is the C engine with no Python on the sending side.
 *
 *   whole_sender HOST PORT ADDRESS SIZE
 *
 * The body is SIZE bytes in bench/large.py's pattern: MiB i is SHA-256(i as
 * eight little-endian bytes) repeated, so the receiver's hash can be checked
 * against the one printed here.  Prints one JSON line at exit: "started" when
 * the first credit arrived and the message went on the link, "settled" when its
 * outcome came back (both CLOCK_MONOTONIC seconds, Python's time.monotonic on
 * Linux), "accepted", and the body's "sha256".
 */
#include "bench.h"

#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <stdlib.h>

enum { CHUNK = 1024 * 1024 };

typedef struct app_t {
  const char *address;
  pn_message_t *message;
  char sha256[2 * SHA256_DIGEST_LENGTH + 1];
  pn_rwbytes_t encoded; /* pn_message_send's buffer, kept across calls */
  bool sent, accepted, settled;
  double started, settled_at;
  int exit_code;
} app_t;

static double mono_s(void) { return (double)mono_ns() / 1e9; }

/* The body in bench/large.py's pattern, and its SHA-256 in hex. */
static char *make_body(size_t size, char *hex) {
  char *body = malloc(size ? size : 1);
  if (!body) {
    fprintf(stderr, "whole_sender: cannot allocate %zu bytes\n", size);
    exit(2);
  }
  for (size_t i = 0, at = 0; at < size; i++, at += CHUNK) {
    unsigned char index[8], seed[SHA256_DIGEST_LENGTH];
    for (int b = 0; b < 8; b++) index[b] = (unsigned char)(i >> (8 * b));
    SHA256(index, sizeof index, seed);
    size_t n = size - at < CHUNK ? size - at : CHUNK;
    for (size_t k = 0; k < n; k += sizeof seed)
      memcpy(body + at + k, seed, n - k < sizeof seed ? n - k : sizeof seed);
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)body, size, digest);
  for (int b = 0; b < SHA256_DIGEST_LENGTH; b++) sprintf(hex + 2 * b, "%02x", digest[b]);
  return body;
}

static bool handle(app_t *a, pn_event_t *e) {
  switch (pn_event_type(e)) {
  case PN_CONNECTION_INIT: {
    pn_connection_t *c = pn_event_connection(e);
    pn_session_t *s = pn_session(c);
    pn_link_t *l = pn_sender(s, "whole-sender");
    pn_connection_set_container(c, "whole-sender");
    pn_connection_open(c);
    pn_session_open(s);
    pn_terminus_set_address(pn_link_target(l), a->address);
    pn_link_open(l);
    break;
  }
  case PN_LINK_FLOW: {
    pn_link_t *l = pn_event_link(e);
    if (a->sent || !pn_link_is_sender(l) || pn_link_credit(l) <= 0) break;
    a->started = mono_s();
    pn_delivery(l, pn_dtag("1", 1));
    if (pn_message_send(a->message, l, &a->encoded) < 0) {
      fprintf(stderr, "whole_sender: pn_message_send: %s\n",
              pn_error_text(pn_message_error(a->message)));
      a->exit_code = 1;
      pn_connection_close(pn_event_connection(e));
    }
    a->sent = true;
    break;
  }
  case PN_DELIVERY: {
    pn_delivery_t *d = pn_event_delivery(e);
    uint64_t state = pn_delivery_remote_state(d);
    if (state == 0 && !pn_delivery_settled(d)) break; /* no outcome yet */
    a->settled_at = mono_s();
    a->settled = true;
    a->accepted = state == PN_ACCEPTED;
    pn_delivery_settle(d);
    pn_connection_close(pn_event_connection(e));
    break;
  }
  case PN_TRANSPORT_CLOSED:
    if (report_condition(e, pn_transport_condition(pn_event_transport(e)))) a->exit_code = 1;
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
  if (argc != 5) {
    fprintf(stderr, "usage: %s HOST PORT ADDRESS SIZE\n", argv[0]);
    return 2;
  }
  app_t a = {.address = argv[3]};
  size_t size = strtoull(argv[4], NULL, 10);
  char *body = make_body(size, a.sha256);
  a.message = pn_message();
  pn_message_set_inferred(a.message, true); /* a binary body becomes a Data section */
  pn_data_put_binary(pn_message_body(a.message), pn_bytes(size, body)); /* copies it */
  free(body);

  char addr[PN_MAX_ADDR];
  pn_proactor_t *proactor = pn_proactor();
  pn_proactor_addr(addr, sizeof addr, argv[1], argv[2]);
  pn_proactor_connect2(proactor, NULL, NULL, addr);
  for (bool running = true; running;) {
    pn_event_batch_t *events = pn_proactor_wait(proactor);
    for (pn_event_t *e; running && (e = pn_event_batch_next(events));) running = handle(&a, e);
    pn_proactor_done(proactor, events);
  }
  printf("{\"started\": %.6f, \"settled\": %.6f, \"accepted\": %s, \"sha256\": \"%s\"}\n",
         a.started, a.settled_at, a.accepted ? "true" : "false", a.sha256);
  pn_proactor_free(proactor);
  pn_message_free(a.message);
  free(a.encoded.start);
  if (!a.settled || !a.accepted) a.exit_code = 1;
  return a.exit_code;
}
