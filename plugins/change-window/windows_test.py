import unittest
from datetime import datetime, timezone

from windows import SpecError, open_window, parse


def at(text):
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


class WindowsTest(unittest.TestCase):
    def test_weekday_range(self):
        windows = parse("mon-fri 09:00-17:00, sat 10:00-12:00")
        self.assertIsNotNone(open_window(windows, at("2026-11-26T09:00")))  # Thursday
        self.assertIsNone(open_window(windows, at("2026-11-26T17:00")))
        self.assertIsNone(open_window(windows, at("2026-11-29T10:30")))  # Sunday
        self.assertEqual(open_window(windows, at("2026-11-28T11:59")).text, "sat 10:00-12:00")

    def test_past_midnight_and_wrapping_days(self):
        windows = parse("fri 22:00-02:00")
        self.assertIsNotNone(open_window(windows, at("2026-11-27T23:00")))  # Friday
        self.assertIsNotNone(open_window(windows, at("2026-11-28T01:59")))  # Saturday
        self.assertIsNone(open_window(windows, at("2026-11-28T22:30")))
        self.assertEqual(len(parse("fri-mon 00:00-24:00")[0].days), 4)
        self.assertEqual(len(parse("sat+sun 00:00-01:00")[0].days), 2)

    def test_refuses_bad_specs(self):
        for spec in ["", "funday 09:00-10:00", "mon 9-10", "mon 09:00-25:00", "mon"]:
            with self.assertRaises(SpecError, msg=spec):
                parse(spec)


if __name__ == "__main__":
    unittest.main()
