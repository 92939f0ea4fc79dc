// Guest side of TensorBoard's iframe-plugin postMessage protocol (the host part lives in the
// TensorBoard bundle). The guest sends the string "experimental.bootstrap" with a MessagePort to its
// parent; over that port both sides exchange JSON {type, id, payload, error, isReply} and reply to
// every message. The host broadcasts "experimental.DataReloaded" on each reload (button or auto)
// and "experimental.RunsChanged" when the run list changes.

export const DATA_RELOADED = 'experimental.DataReloaded';
export const RUNS_CHANGED = 'experimental.RunsChanged';

/**
 * @typedef {Object} HostMessage
 * @property {string} type
 * @property {number} id
 * @property {unknown} payload
 * @property {string|null} error
 * @property {boolean} isReply
 */

/**
 * Connects to the TensorBoard host page, if this page runs in an iframe.
 * @param {Record<string, (payload: unknown) => unknown>} handlers  By message type.
 * @returns {MessagePort|null}  The port, or null outside an iframe.
 */
export function connectToHost(handlers) {
  if (!window.parent || window.parent === window) return null;
  const channel = new MessageChannel();
  const port = channel.port1;
  port.onmessage = (event) => {
    /** @type {HostMessage} */
    let message;
    try {
      message = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    if (!message || message.isReply) return;
    const reply = (payload, error) =>
      port.postMessage(
        JSON.stringify({ type: message.type, id: message.id, payload, error, isReply: true }),
      );
    const handler = handlers[message.type];
    Promise.resolve()
      .then(() => (handler ? handler(message.payload) : null))
      .then(
        (result) => reply(result ?? null, null),
        (e) => reply(null, String((e && e.message) || e)),
      );
  };
  try {
    window.parent.postMessage('experimental.bootstrap', window.location.origin, [channel.port2]);
  } catch (_) {
    return null; // a parent of another origin: polling still refreshes the page
  }
  return port;
}
