#!/usr/bin/env bash
python -m unittest -v tests.test_interest 2>&1
