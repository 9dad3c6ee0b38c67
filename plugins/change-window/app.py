"""change-window: lets a restore through only inside configured UTC windows.

Config:
- `windows` (required): e.g. `mon-fri 09:00-17:00, sat 10:00-12:00` (see
  windows.py for the format). Times are UTC.

The time comes from the host clock import (`now-ms`), which lockstep's tests
and `lockstep plugin test` can fix. Built with componentize-py:
    componentize-py -d ../../wit/lockstep-plugin@0.1.0 -w check componentize app -o change-window.wasm
"""

from datetime import datetime, timezone

import wit_world
from wit_world.imports import host
from wit_world.imports.types import RestoreContext, Verdict, Verdict_Fail, Verdict_Pass

from windows import SpecError, open_window, parse


class WitWorld(wit_world.WitWorld):
    def check(self, ctx: RestoreContext) -> Verdict:
        config = dict(ctx.config)
        spec = config.get("windows")
        if spec is None:
            return Verdict_Fail("config `windows` is required, e.g. `mon-fri 09:00-17:00`")
        try:
            windows = parse(spec)
        except SpecError as error:
            return Verdict_Fail(f"config `windows`: {error}")

        now = datetime.fromtimestamp(host.now_ms() / 1000, tz=timezone.utc)
        shown = now.strftime("%a %Y-%m-%d %H:%M UTC")
        window = open_window(windows, now)
        if window is None:
            return Verdict_Fail(f"outside the change windows ({spec}): it is {shown}")
        host.log(host.LogLevel.INFO, "inside change window", [("window", window.text), ("now", shown)])
        return Verdict_Pass()
