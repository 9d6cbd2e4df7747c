import unittest

from calc import clamp, mean


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mean([])


class ClampTest(unittest.TestCase):
    def test_inside_and_outside(self):
        self.assertEqual(clamp(5, 0, 10), 5)
        self.assertEqual(clamp(-1, 0, 10), 0)
        self.assertEqual(clamp(11, 0, 10), 10)

    def test_bad_range(self):
        with self.assertRaises(ValueError):
            clamp(1, 2, 0)


if __name__ == "__main__":
    unittest.main()
