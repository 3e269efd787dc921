// The tags of an event (epoch, dc, type, subtype): the rule the server applies to them
// (sluice_blob::key::check_tag), and the second an epoch stands for, to key drop records.

/** Longest tag, in UTF-8 bytes (sluice_blob::key::MAX_TAG_BYTES). */
export const MAX_TAG_BYTES = 64;

/** Whether `s` is a valid dc / type / subtype: 1..=64 bytes (subtype may be empty), no ':', '|' or control character. */
export function validTag(s, allowEmpty = false) {
  if (typeof s !== 'string') return false;
  if (s === '') return allowEmpty;
  if (Buffer.byteLength(s) > MAX_TAG_BYTES) return false;
  // eslint-disable-next-line no-control-regex
  return !/[:|\u0000-\u001f\u007f-\u009f]/.test(s);
}

/**
 * The whole Unix second an `epoch` value stands for, as the server normalises it: whole
 * seconds, milliseconds (values >= 1e11), float seconds, RFC 3339 strings. `undefined` when it
 * is none of these.
 */
export function epochSecond(v) {
  if (typeof v === 'number' && Number.isFinite(v)) return Math.floor(v >= 1e11 ? v / 1000 : v);
  if (typeof v === 'string' && v !== '') {
    if (/^-?\d+(\.\d+)?$/.test(v)) return epochSecond(Number(v));
    const ms = Date.parse(v);
    if (Number.isFinite(ms)) return Math.floor(ms / 1000);
  }
  return undefined;
}

/** The key a drop of `ev` is counted under: `{epoch, dc?, type, subtype}`, or undefined when its tags cannot key one. */
export function dropKey(ev, now = Math.floor(Date.now() / 1000)) {
  if (ev === null || typeof ev !== 'object' || !validTag(ev.type)) return undefined;
  const subtype = ev.subtype === undefined || ev.subtype === null ? '' : ev.subtype;
  if (!validTag(subtype, true)) return undefined;
  if (ev.dc !== undefined && ev.dc !== null && !validTag(ev.dc)) return undefined;
  const epoch = ev.epoch === undefined ? now : epochSecond(ev.epoch);
  if (epoch === undefined) return undefined;
  const key = { epoch, type: ev.type, subtype };
  if (typeof ev.dc === 'string') key.dc = ev.dc;
  return key;
}
