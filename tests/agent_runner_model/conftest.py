"""Assertion rewriting for the helpers the model tests share, so their failures show the values."""

import pytest

pytest.register_assert_rewrite("model_twins")
