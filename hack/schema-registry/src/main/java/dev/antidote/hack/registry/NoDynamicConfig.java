package dev.antidote.hack.registry;

import java.util.List;

import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;

/**
 * The registry's list of runtime-editable settings, empty. Apicurio builds it at build time
 * with a Quarkus extension whose deployment half Maven Central does not serve; the stack never
 * edits settings at run time, and the Confluent-compatible API does not read them.
 */
@Singleton
public class NoDynamicConfig {

    @Produces
    @Singleton
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
