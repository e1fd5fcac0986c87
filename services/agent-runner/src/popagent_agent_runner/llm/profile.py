"""The model profile an OpenAI-compatible server's model gets, as pydantic-ai's `OpenAICompatibleProvider` gives it."""

from __future__ import annotations

from pydantic_ai.profiles import ModelProfile, merge_profile
from pydantic_ai.profiles.amazon import amazon_model_profile
from pydantic_ai.profiles.groq import groq_model_profile
from pydantic_ai.profiles.mistral import mistral_model_profile
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer, OpenAIModelProfile, openai_model_profile

from popagent_agent_runner.llm.pydantic_ai_internals import special_token_route_profile, vendor_family_model_profile

__all__ = ["compatible_model_profile"]


def _mistral_model_profile(model_name: str) -> ModelProfile:
    profile = mistral_model_profile(model_name)
    if model_name.startswith("magistral"):
        return profile
    return merge_profile(openai_model_profile(model_name), profile)


_VENDOR_PROFILES = {
    "bedrock": amazon_model_profile,
    "groq": groq_model_profile,
    "mistral": _mistral_model_profile,
    "mistralai": _mistral_model_profile,
}


def compatible_model_profile(model_name: str) -> ModelProfile:
    """The profile `OpenAICompatibleProvider.model_profile` gives `model_name`, built without importing the openai SDK.

    A `vendor/model` id gets that vendor's family profile, anything else the profile OpenAI-compatible
    servers share; a test checks it against the provider's own for a list of ids.
    """
    profile = vendor_family_model_profile(model_name, overrides=_VENDOR_PROFILES)
    if profile is None:
        profile = openai_model_profile(model_name)
    return merge_profile(
        OpenAIModelProfile(json_schema_transformer=OpenAIJsonSchemaTransformer),
        profile,
        special_token_route_profile("openai-compatible", model_name),
    )
