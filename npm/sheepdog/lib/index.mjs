// The ESM face of the CommonJS implementation (one implementation, importable both ways).
import api from "./index.js";

export const {
  SheepdogError,
  binaryPath,
  supervise,
  start,
  list,
  logs,
  stop,
  restart,
  update,
  wait,
  reap,
  clear,
  send,
  events,
} = api;
export default api;
