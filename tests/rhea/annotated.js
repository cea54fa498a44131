'use strict';
// Sends messages carrying message annotations and application properties of several types, with
// amqp-value, data-section and map bodies; reports the outcome of each.
const { rhea, args, deadline, connect, finish } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, 'rhea-annotated');
const sender = conn.open_sender({ target: opts.address });
const bodies = [
  'plain string body ✓',
  rhea.message.data_section(Buffer.from([0, 1, 2, 253, 254, 255])),
  { a: 1, b: 'two', nested: [1, 2, 3], flag: true },
];
const outcomes = [];
let sent = 0;

sender.on('sendable', (ctx) => {
  while (ctx.sender.sendable() && sent < bodies.length) {
    ctx.sender.send({
      message_id: `annotated-${sent}`,
      subject: 'interop',
      message_annotations: { 'x-opt-test-annotation': 'kept', 'x-opt-sequence': sent },
      application_properties: {
        seq: sent,
        str: 'héllo wörld',
        neg: -7,
        big: 1099511627776,
        dbl: 1.5,
        bool: true,
        nothing: null,
      },
      body: bodies[sent],
    });
    sent += 1;
  }
});
for (const outcome of ['accepted', 'rejected', 'released', 'modified']) {
  sender.on(outcome, () => {
    outcomes.push(outcome);
    if (outcomes.length === bodies.length) finish([conn], { outcomes: outcomes });
  });
}
