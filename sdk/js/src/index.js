// @sluice/sdk: send events to a Sluice collector and read them back.
export { Emitter } from './emitter.js';
export { Reader, Events, Tail } from './reader.js';
export { SluiceError } from './net.js';
export { epochSecond } from './tags.js';
