// Types of the ESM entry point: the same API as index.d.ts.
import api = require("./index.js");
export * from "./index.js";
export default api;
