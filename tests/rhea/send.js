'use strict';
// A rhea producer: sends `messages` (each {body, durable, priority, properties, subject}) to
// `address` in order and reports each one's outcome, in the order they were sent.
const { args, deadline, connect, finish } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, opts.container_id || 'rhea-send');
const sender = conn.open_sender({ target: opts.address });
const outcomes = new Array(opts.messages.length).fill(null);
let sent = 0;
let settled = 0;

sender.on('sendable', (ctx) => {
  while (ctx.sender.sendable() && sent < opts.messages.length) {
    const m = opts.messages[sent];
    const delivery = ctx.sender.send({
      body: m.body,
      durable: Boolean(m.durable),
      priority: m.priority,
      subject: m.subject,
      application_properties: m.properties,
    });
    delivery.index = sent;
    sent += 1;
  }
});
for (const outcome of ['accepted', 'rejected', 'released', 'modified']) {
  sender.on(outcome, (ctx) => {
    outcomes[ctx.delivery.index] = outcome;
    settled += 1;
    if (settled === opts.messages.length) finish([conn], { outcomes: outcomes });
  });
}
