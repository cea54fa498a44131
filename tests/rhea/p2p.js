'use strict';
// rhea sender -> router -> rhea receiver: `count` unsettled messages; reports every outcome the
// sender saw and every body the receiver got, in arrival order.
const { args, emit, deadline, connect, finish, bodyFor, describeBody } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const outcomes = { accepted: 0, rejected: 0, released: 0, modified: 0 };
const received = [];
let sent = 0;
let done = false;

const rconn = connect(opts, 'rhea-p2p-receiver');
const sconn = connect(opts, 'rhea-p2p-sender');
const receiver = rconn.open_receiver({ source: opts.address, credit_window: 100 });

function maybeDone() {
  const settled = outcomes.accepted + outcomes.rejected + outcomes.released + outcomes.modified;
  if (!done && settled === opts.count && received.length >= opts.count) {
    done = true;
    finish([sconn, rconn], { sent: sent, outcomes: outcomes, received: received });
  }
}

receiver.on('message', (ctx) => {
  received.push(describeBody(ctx.message.body));
  maybeDone();
});

receiver.once('receiver_open', () => {
  emit({ event: 'receiver_open' });
  const sender = sconn.open_sender({ target: opts.address });
  sender.on('sendable', (ctx) => {
    while (ctx.sender.sendable() && sent < opts.count) {
      ctx.sender.send({ message_id: sent, body: bodyFor(sent) });
      sent += 1;
    }
  });
  for (const outcome of Object.keys(outcomes)) {
    sender.on(outcome, () => {
      outcomes[outcome] += 1;
      maybeDone();
    });
  }
});
