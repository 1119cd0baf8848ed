import sys
import unittest


class TestThings(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(1, 1)

    def test_fail(self):
        self.assertEqual(1, 2)

    def test_error(self):
        raise KeyError("boom")

    def test_doc(self):
        """Adds numbers correctly.

        More text here.
        """
        self.assertEqual(1 + 1, 2)

    def test_doc_fail(self):
        """Subtracts numbers."""
        self.assertEqual(1 - 1, 1)

    @unittest.skip("not today")
    def test_skip(self):
        pass

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertTrue(False)

    @unittest.expectedFailure
    def test_xpass(self):
        self.assertTrue(True)

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)

    def test_subtests_ok(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 5)

    def test_prints(self):
        print("hello from stdout")
        sys.stderr.write("partial line on stderr ")
        self.assertTrue(True)


class TestSetupClassFails(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("no db")

    def test_a(self):
        pass
