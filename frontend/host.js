// Guest side of TensorBoard's iframe-plugin postMessage protocol (the host part lives in the
// TensorBoard bundle). The guest sends the string "experimental.bootstrap" with a MessagePort to its
// parent; over that port both sides exchange JSON {type, id, payload, error, isReply} and reply to
// every message. The host broadcasts "experimental.DataReloaded" on each reload (button or auto)
// and "experimental.RunsChanged" when the run list changes; the guest may ask
// "experimental.GetURLPluginData" for the `p.<plugin>.*` entries of the page's URL hash.

export const DATA_RELOADED = 'experimental.DataReloaded';
export const RUNS_CHANGED = 'experimental.RunsChanged';
export const GET_URL_DATA = 'experimental.GetURLPluginData';

/** The link to the host page: requests with replies. */
export class HostLink {
  /** @param {MessagePort} port */
  constructor(port) {
    this.port = port;
    this.nextId = 1;
    /** @type {Map<number, {resolve: Function, reject: Function}>} */
    this.waiting = new Map();
  }

  /**
   * Sends a request and resolves with the host's reply payload.
   * @param {string} type
   * @param {unknown} payload
   * @param {number} [timeoutMs]
   * @returns {Promise<any>}
   */
  request(type, payload, timeoutMs = 2000) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error(`${type}: no reply from TensorBoard`));
      }, timeoutMs);
      this.waiting.set(id, {
        resolve: (value) => { clearTimeout(timer); resolve(value); },
        reject: (error) => { clearTimeout(timer); reject(error); },
      });
      this.port.postMessage(JSON.stringify({ type, id, payload, error: null, isReply: false }));
    });
  }
}

/**
 * Connects to the TensorBoard host page, if this page runs in an iframe.
 * @param {Record<string, (payload: unknown) => unknown>} handlers  By message type.
 * @returns {HostLink|null}  null outside an iframe.
 */
export function connectToHost(handlers) {
  if (!window.parent || window.parent === window) return null;
  const channel = new MessageChannel();
  const port = channel.port1;
  const link = new HostLink(port);
  port.onmessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    if (!message) return;
    if (message.isReply) {
      const waiter = link.waiting.get(message.id);
      if (!waiter) return;
      link.waiting.delete(message.id);
      if (message.error) waiter.reject(new Error(message.error));
      else waiter.resolve(message.payload);
      return;
    }
    const reply = (payload, error) =>
      port.postMessage(JSON.stringify({ type: message.type, id: message.id, payload, error, isReply: true }));
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
  return link;
}
