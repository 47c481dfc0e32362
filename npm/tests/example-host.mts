// The same API through `import` (ESM), type-checked by the package tests.
import sheepdog, { SheepdogError, list, supervise, type EntryView } from "sheepdog";

const c = supervise("sleep", ["1"], { owner: false, killWait: 1500 });
c.once("stopping", (e) => console.log(e.trigger));
const views: EntryView[] = await list({ all: true });
console.log(views.length, sheepdog.binaryPath(), new SheepdogError("x").exitStatus);
